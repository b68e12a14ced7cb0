// The CLI's subcommands. Each Register* adds its subcommand(s) to `app`; the subcommand's callback
// does the work and throws cloudtune::InputError (message naming file/line/column or argument) on
// bad input, which main() prints to stderr as "cloudtune: error: ..." with exit status 1.
#pragma once

#include <CLI/CLI.hpp>

namespace cloudtune::cli {

void RegisterFitCommands(CLI::App& app);     // fit, predict           (fit_command.cpp)
void RegisterStepsCommand(CLI::App& app);    // steps                  (steps_command.cpp)
void RegisterSearchCommands(CLI::App& app);  // recommend, replay      (search_command.cpp)

// Writes `text` to `path` atomically: a temporary file in the same directory, then rename.
// Throws cloudtune::InputError if it cannot.
void WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace cloudtune::cli
