// The CLI's subcommands. Each Register* adds its subcommand(s) to `app`; the subcommand's callback
// does the work and throws cloudtune::InputError (message naming file/line/column or argument) on
// bad input, which main() prints to stderr as "cloudtune: error: ..." with exit status 1.
#pragma once

#include <CLI/CLI.hpp>

namespace cloudtune::cli {

void RegisterFitCommands(CLI::App& app);     // fit, predict           (fit_command.cpp)
void RegisterStepsCommand(CLI::App& app);    // steps                  (steps_command.cpp)
void RegisterRecommendCommand(CLI::App& app);  // recommend          (recommend_command.cpp)
void RegisterReplayCommand(CLI::App& app);     // replay             (replay/replay_command.cpp)

// Writes `text` to `path` atomically (core::WriteFileAtomicallyOrThrow), or to stdout when `path`
// is empty. Throws cloudtune::InputError if it cannot.
void Output(const std::string& path, const std::string& text);
// A finite number parsed from an argument; InputError "what: 'text' is not a number" otherwise.
double ParseNumber(const std::string& text, const std::string& what);

}  // namespace cloudtune::cli
