#include "cli/commands.h"
namespace cloudtune::cli {
void RegisterStepsCommand(CLI::App&) {}
}  // namespace cloudtune::cli
