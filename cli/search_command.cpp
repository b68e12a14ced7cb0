#include "cli/commands.h"
namespace cloudtune::cli {
void RegisterSearchCommands(CLI::App&) {}
}  // namespace cloudtune::cli
