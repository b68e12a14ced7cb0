// The CLI's subcommands. Each Register* adds its subcommand(s) to `app`; the subcommand's callback
// does the work and throws cloudtune::InputError (message naming file/line/column or argument) on
// bad input, which main() prints to stderr as "cloudtune: error: ..." with exit status 1.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "search/search.h"

namespace cloudtune::cli {

void RegisterFitCommands(CLI::App& app);        // fit, predict           (fit_command.cpp)
void RegisterStepsCommand(CLI::App& app);       // steps                  (steps_command.cpp)
void RegisterRecommendCommand(CLI::App& app);   // recommend          (recommend_command.cpp)
void RegisterReplayCommand(CLI::App& app);      // replay             (replay/replay_command.cpp)
void RegisterReportCommand(CLI::App& app);      // report             (report_command.cpp)
void RegisterStatusCommand(CLI::App& app);      // status             (status_command.cpp)
void RegisterHistoryCommand(CLI::App& app);     // history            (history_command.cpp)
void RegisterLaunchSpecCommand(CLI::App& app);  // launch-spec        (launch_spec_command.cpp)

// `recommend --from PATH --format json --pareto`: the job's own search re-run on what the sidecar
// or state file at `path` recorded (recommend_command.cpp). Throws cloudtune::InputError.
nlohmann::json RecommendFromRecorded(const std::string& path);

// Writes `text` to `path` atomically (core::WriteFileAtomicallyOrThrow), or to stdout when `path`
// is empty. Throws cloudtune::InputError if it cannot.
void Output(const std::string& path, const std::string& text);
// A finite number parsed from an argument; InputError "what: 'text' is not a number" otherwise.
double ParseNumber(const std::string& text, const std::string& what);
// A configuration given as TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]] to `option`
// (--current, --start); purchase on-demand when not given. InputError "option ...: ..." naming
// the part that is wrong otherwise.
search::Config ParseConfigArg(const std::string& text, const std::string& option);

}  // namespace cloudtune::cli
