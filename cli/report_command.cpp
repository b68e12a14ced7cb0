// cloudtune report: one self-contained HTML file (matplotlib plots inlined as SVG) from a job's
// sidecar (and optionally its state file), or from a `cloudtune replay --format json` result.
//
// The C++ side reads and checks the inputs (cli/sidecar_reader.h), re-runs the job's own search at
// its latest recommendation for the Pareto front (RecommendFromRecorded), and hands everything as
// one JSON document to scripts/report/cloudtune_report.py, which draws the plots, writes the HTML
// and prints a five-line summary on stdout.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/sidecar_reader.h"
#include "estimator/core/error.h"
#include "estimator/core/version.h"
#include "plugin/runtime/state.h"

extern char** environ;

namespace cloudtune::cli {
namespace {

namespace fs = std::filesystem;

struct ReportArgs {
  std::string input, state, out;
};

// Runs argv[0] (looked up in PATH) with stdout/stderr inherited (or both sent to /dev/null when
// `quiet`); returns its exit status (-1 when it could not be started or was killed).
int Spawn(const std::vector<std::string>& args, bool quiet = false) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The plotting script: $CLOUDTUNE_REPORT_SCRIPT, else next to an installed binary
// (PREFIX/share/cloudtune/report/), else in the source tree this binary was built from.
std::string FindScript() {
  if (const char* env = std::getenv("CLOUDTUNE_REPORT_SCRIPT")) {
    if (!fs::is_regular_file(env))
      throw InputError(std::string("CLOUDTUNE_REPORT_SCRIPT: '") + env + "': no such file");
    return env;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> tries;
  if (!ec)
    tries = {exe.parent_path() / "../share/cloudtune/report/cloudtune_report.py",
             exe.parent_path() / "../../scripts/report/cloudtune_report.py"};
  tries.push_back(fs::path(CLOUDTUNE_SOURCE_DIR) / "scripts/report/cloudtune_report.py");
  for (const auto& p : tries)
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  throw InputError(
      "report: cannot find scripts/report/cloudtune_report.py (set "
      "CLOUDTUNE_REPORT_SCRIPT)");
}

// $CLOUDTUNE_PYTHON, else the first of python3 (PATH) and Debian's /usr/bin/python3 that has
// matplotlib (a PATH python3 may be a virtual environment or pyenv without it).
std::string FindPython() {
  const char* env = std::getenv("CLOUDTUNE_PYTHON");
  const std::vector<std::string> tries =
      env && *env ? std::vector<std::string>{env}
                  : std::vector<std::string>{"python3", "/usr/bin/python3"};
  bool any = false;
  for (const auto& python : tries) {
    const int rc = Spawn({python, "-c", "import matplotlib"}, /*quiet=*/true);
    if (rc == 0) return python;
    any = any || (rc != -1 && rc != 127);
  }
  if (!any)
    throw InputError("report: needs " + tries[0] +
                     ", which cannot be run (Debian: apt-get install python3 python3-matplotlib)");
  throw InputError("report: " + tries[0] +
                   " has no matplotlib (Debian: apt-get install python3-matplotlib)");
}

// A replay result ({"schema":"cloudtune.replay/1",...}), or null when `path` is no such file.
nlohmann::json ReadReplay(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.value("schema", "") == "cloudtune.replay/1") return j;
  return nullptr;
}

nlohmann::json SidecarPayload(const ReportArgs& a) {
  const Sidecar s = ReadSidecar(a.input);
  nlohmann::json d = {{"kind", "sidecar"}, {"source", a.input}};
  nlohmann::json records = nlohmann::json::array();
  for (const auto& r : s.records) {
    nlohmann::json j = r.json;
    j["line"] = r.line;
    records.push_back(std::move(j));
  }
  d["records"] = std::move(records);
  d["problems"] = s.Problems();
  d["lines"] = s.lines;
  // The latest recommendation re-run by the job's own search, for the Pareto front.
  if (s.Last("recommendation")) {
    try {
      d["rerun"] = RecommendFromRecorded(a.input);
    } catch (const std::exception& e) {
      d["rerun_error"] = e.what();
    }
  }
  if (!a.state.empty()) {
    const runtime::LoadResult lr = runtime::LoadState(a.state, "");
    if (lr.status == runtime::LoadStatus::kMissing) throw InputError(a.state + ": cannot open");
    if (lr.status != runtime::LoadStatus::kLoaded || !lr.state) throw InputError(lr.message);
    d["state"] = lr.state->ToJson();
    d["state"]["source"] = a.state;
  }
  return d;
}

void RunReport(const ReportArgs& a) {
  if (a.out.empty()) throw InputError("-o: required (the HTML file to write)");
  const std::string script = FindScript();
  nlohmann::json d;
  if (nlohmann::json replay = ReadReplay(a.input); !replay.is_null()) {
    if (!a.state.empty()) throw InputError("--state: only with a sidecar, not a replay result");
    d = {{"kind", "replay"}, {"source", a.input}, {"replay", std::move(replay)}};
  } else {
    d = SidecarPayload(a);
  }
  d["version"] = core::Version();
  const std::string python = FindPython();
  char tmpl[] = "/tmp/cloudtune_report.XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) throw InputError("report: cannot create a temporary file in /tmp");
  ::close(fd);
  const std::string data = tmpl;
  std::ofstream(data) << d.dump();
  const int rc = Spawn({python, script, "--data", data, "-o", a.out});
  std::remove(data.c_str());
  if (rc != 0)
    throw InputError("report: " + script + " failed (exit status " + std::to_string(rc) + ")");
}

}  // namespace

void RegisterReportCommand(CLI::App& app) {
  auto* rep = app.add_subcommand(
      "report", "Write a self-contained HTML report (plots) of a job's sidecar or a replay result");
  auto ra = std::make_shared<ReportArgs>();
  rep->add_option("input", ra->input,
                  "The job's sidecar (cloudtune.sidecar.jsonl) or a `replay --format json` result")
      ->required();
  rep->add_option("--state", ra->state, "The job's state file (CLOUDTUNE_STATE), optional");
  rep->add_option("-o,--output", ra->out, "HTML file to write")->required();
  rep->callback([ra]() { RunReport(*ra); });
}

}  // namespace cloudtune::cli
