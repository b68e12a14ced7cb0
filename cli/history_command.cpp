// cloudtune history list|show ID|export: the job history (plugin/runtime/history.h) that
// warm-starts new jobs of a model seen before. The database is CLOUDTUNE_HISTORY, else the user's
// cache directory; --db overrides both.
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "cli/commands.h"
#include "estimator/core/env.h"
#include "estimator/core/error.h"
#include "plugin/runtime/history.h"

namespace cloudtune::cli {
namespace {

struct HistoryArgs {
  std::string db, format = "table", out;
  long long id = 0;
  int limit = 20;
};

std::unique_ptr<runtime::History> OpenHistory(const HistoryArgs& a) {
  std::string path = a.db;
  if (path.empty()) path = core::GetEnv("CLOUDTUNE_HISTORY").value_or("");
  if (path == "off") throw InputError("CLOUDTUNE_HISTORY is off: no history to read (use --db)");
  if (path.empty()) path = runtime::DefaultHistoryPath();
  if (path.empty()) throw InputError("no history database: set --db or CLOUDTUNE_HISTORY");
  std::string error;
  auto h = runtime::History::Open(path, {}, &error);
  if (!h) throw InputError(error);
  return h;
}

std::string Table(const std::vector<runtime::HistoryJob>& jobs) {
  std::ostringstream s;
  s << std::left << std::setw(5) << "id" << std::setw(22) << "recorded (UTC)" << std::setw(26)
    << "signature" << std::setw(22) << "instance type" << std::right << std::setw(9) << "steps"
    << std::setw(9) << "hours" << std::setw(10) << "USD"
    << "  job\n";
  for (const auto& j : jobs) {
    s << std::left << std::setw(5) << j.id << std::setw(22) << j.recorded_at << std::setw(26)
      << j.signature.substr(0, 25) << std::setw(22) << j.instance_type.substr(0, 21) << std::right
      << std::setw(9) << j.steps << std::setw(9) << std::fixed << std::setprecision(3) << j.hours
      << std::setw(10) << std::setprecision(2) << j.cost_usd << "  " << j.job_id << "\n";
  }
  if (jobs.empty()) s << "(no jobs recorded yet)\n";
  return s.str();
}

}  // namespace

void RegisterHistoryCommand(CLI::App& app) {
  auto a = std::make_shared<HistoryArgs>();
  CLI::App* h = app.add_subcommand(
      "history", "The job history that warm-starts new jobs of a model seen before (SQLite)");
  h->add_option("--db", a->db,
                "History database (default $CLOUDTUNE_HISTORY, else "
                "~/.cache/cloudtune/history.sqlite)");
  h->require_subcommand(1);
  CLI::App* list = h->add_subcommand("list", "Jobs, newest first");
  list->fallthrough();  // --db also after the subcommand
  list->add_option("--limit", a->limit, "Most jobs to list (0 = all; default 20)");
  list->add_option("--format", a->format, "table or json (default table)");
  list->callback([a] {
    const auto jobs = OpenHistory(*a)->List(a->limit);
    if (a->format == "json") {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& job : jobs) j.push_back(job.ToJson());
      Output("", j.dump(2) + "\n");
    } else if (a->format == "table") {
      Output("", Table(jobs));
    } else {
      throw InputError("--format: '" + a->format + "' is not table or json");
    }
  });
  CLI::App* show = h->add_subcommand("show", "One job in full (JSON)");
  show->fallthrough();
  show->add_option("id", a->id, "Job id (from `history list`)")->required();
  show->callback([a] {
    const auto job = OpenHistory(*a)->Get(a->id);
    if (!job) throw InputError("history: no job with id " + std::to_string(a->id));
    Output("", job->ToJson().dump(2) + "\n");
  });
  CLI::App* exp = h->add_subcommand("export", "Every job in full as JSON Lines");
  exp->fallthrough();
  exp->add_option("-o,--output", a->out, "Write to this file instead of stdout");
  exp->callback([a] {
    const auto h = OpenHistory(*a);
    std::string text;
    for (const auto& brief : h->List(0))
      if (const auto job = h->Get(brief.id)) text += job->ToJson().dump() + "\n";
    Output(a->out, text);
  });
}

}  // namespace cloudtune::cli
