#include "cli/commands.h"
namespace cloudtune::cli {
void RegisterFitCommands(CLI::App&) {}
}  // namespace cloudtune::cli
