// cloudtune replay: jobs replayed over measured traces (cli/replay/replay.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/replay/oracle.h"
#include "cli/replay/parallel.h"
#include "cli/replay/replay.h"
#include "estimator/core/error.h"
#include "estimator/core/stats.h"

namespace cloudtune::cli {

using core::Median;

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// One scenario of a replay command: its seeds' runs, and the oracle's tables while they run.
struct ScenarioRuns {
  replay::Scenario scenario;
  std::vector<uint64_t> seeds;
  std::vector<std::vector<replay::PolicyResult>> results;  // by seed
  std::once_flag built;
  std::unique_ptr<replay::Oracle> oracle;  // its tables serve every seed; freed after the last
  std::atomic<size_t> left{0};             // seeds not yet replayed
};

// Loads every scenario (the first bad file throws, naming it), each with the seeds given, else its
// own.
std::vector<std::unique_ptr<ScenarioRuns>> LoadAll(const std::vector<std::string>& paths,
                                                   const std::vector<uint64_t>& seeds,
                                                   const std::string& carry) {
  std::vector<std::unique_ptr<ScenarioRuns>> all;
  Progress progress("replay", static_cast<int>(paths.size()));
  for (const auto& path : paths) {
    progress.Step(static_cast<int>(all.size()) + 1, "loading " + path);
    auto sr = std::make_unique<ScenarioRuns>();
    sr->scenario = replay::LoadScenario(path, carry);
    sr->seeds = seeds.empty() ? sr->scenario.seeds : seeds;
    all.push_back(std::move(sr));
  }
  return all;
}

// Replays every seed of every scenario on `jobs` threads (0 = one per core), all runs in one pool
// so that no core idles at the end of a scenario with fewer seeds left than cores. Each run has
// its own simulator and runtime; the scenario and the oracle's tables are only read. A scenario's
// tables are built by the first of its runs to start (on the same threads) and freed when its last
// run ends: runs start in scenario order, so only the scenarios in flight hold tables. The results
// do not depend on the threads.
void RunAll(std::vector<std::unique_ptr<ScenarioRuns>>* all, const replay::OracleOptions& oo,
            unsigned jobs) {
  std::vector<std::pair<size_t, size_t>> runs;  // (scenario, seed index)
  for (size_t i = 0; i < all->size(); ++i) {
    ScenarioRuns& sr = *(*all)[i];
    sr.results.resize(sr.seeds.size());
    sr.left = sr.seeds.size();
    for (size_t k = 0; k < sr.seeds.size(); ++k) runs.emplace_back(i, k);
  }
  Progress progress("replay", static_cast<int>(runs.size()));
  std::mutex shown;
  int done = 0;
  replay::ParallelFor(runs.size(), jobs, [&](size_t r) {
    ScenarioRuns& sr = *(*all)[runs[r].first];
    std::call_once(sr.built,
                   [&] { sr.oracle = std::make_unique<replay::Oracle>(sr.scenario, oo); });
    const size_t k = runs[r].second;
    sr.results[k] = replay::RunReplay(sr.scenario, sr.seeds[k], sr.oracle.get());
    if (--sr.left == 0) sr.oracle.reset();
    std::lock_guard<std::mutex> lock(shown);
    progress.Step(++done, sr.scenario.name + " seed " + std::to_string(sr.seeds[k]));
  });
}

// What the summary gathers over runs.
struct Totals {
  std::vector<double> rel_oracle, saving_fixed, saving_spot, explore_share;
  std::map<std::string, int> misses;  // runs whose deadline or budget a policy missed
  int oracle_met_cloudtune_missed = 0;
  std::map<std::string, std::vector<double>> rel_by_policy;
  std::vector<double> vs_uniform;  // cloudtune / Uniform Progress cost, same deadline outcome
  std::vector<double> vs_hindsight_fixed;  // cloudtune / best fixed configuration, cost goal
  std::vector<double> time_vs_oracle;      // cloudtune / oracle makespan, time goal
  // The same against the oracle's bound (no schedule of its model does better): the ratio to the
  // optimum of the oracle's model lies between the two.
  std::vector<double> rel_oracle_bound, time_vs_oracle_bound;
  int uniform_met_cloudtune_missed = 0;
  // Mixed clusters: cloudtune / cloudtune-one-type cost (runs that have both), runs in which
  // cloudtune ran a mixed cluster, and deadline or budget outcomes that differ.
  std::vector<double> vs_one_type;
  int mixed_runs = 0, one_type_met_mixed_missed = 0, mixed_met_one_type_missed = 0;
};

// One policy's result on one run, as the JSON output lists it.
nlohmann::json PolicyJson(const replay::PolicyResult& r, double rel) {
  nlohmann::json pj = {{"policy", r.policy},
                       {"cost_usd", r.cost},
                       {"makespan_h", r.makespan_h},
                       {"switches", r.switches},
                       {"revocations", r.revocations},
                       {"zone_failovers", r.zone_failovers},
                       {"measurements", r.measurements},
                       {"exploration_cost_usd", r.exploration_cost},
                       {"cost_vs_oracle", rel},
                       {"finished", r.finished},
                       {"deadline_met", r.deadline_met},
                       {"budget_met", r.budget_met},
                       {"waited_h", r.waited_h},
                       {"mixed_switches", r.mixed_switches},
                       {"mixed_hours", r.mixed_hours}};
  if (r.policy == "oracle")
    pj["cost_lower_usd"] = r.cost_lower, pj["makespan_lower_h"] = r.makespan_lower_h,
    pj["levels"] = r.levels;
  if (!r.schedule.empty()) pj["schedule"] = r.schedule;
  return pj;
}

// cloudtune against the same runtime with mixed clusters off, on one run.
void TallyMixed(const replay::PolicyResult& ct, const replay::PolicyResult& one_type, Totals* t) {
  if (!(one_type.cost > 0)) return;
  t->vs_one_type.push_back(ct.cost / one_type.cost);
  if (ct.mixed_switches > 0) ++t->mixed_runs;
  const bool ct_met = ct.deadline_met && ct.budget_met;
  const bool one_met = one_type.deadline_met && one_type.budget_met;
  if (ct_met && !one_met) ++t->mixed_met_one_type_missed;
  if (!ct_met && one_met) ++t->one_type_met_mixed_missed;
}

// The head of one run's table: the scenario, its target, constraints and the columns. Written
// in its own stream: the tables before it leave `out` in fixed notation at one or two digits,
// which would print a deadline of 0.225 h as 0.2 h.
void PrintRunHeader(std::ostream& out, const replay::Scenario& s, uint64_t seed) {
  std::ostringstream os;
  os << "scenario " << s.name << "  seed " << seed << "  (target ";
  if (s.measured)
    os << "metric " << s.measured->Metric(s.target_metric) << " = " << s.target_progress
       << " B0-steps, measured";
  else
    os << "progress " << s.target_progress << " B0-steps, plain theory";
  os << "; " << s.candidates.size() << " traced configurations";
  if (!s.spot.empty()) {
    size_t zones = 0;
    for (const auto& [type, market] : s.spot) zones += market.zones();
    os << "; spot capacity from " << zones << " trace(s), reading "
       << replay::SpotReadingName(s.spot_reading);
  }
  if (s.objective.deadline_h > 0) os << "; deadline " << s.objective.deadline_h << " h";
  if (s.objective.budget_usd > 0) os << "; budget $" << s.objective.budget_usd;
  os << ")\n";
  os << std::left << std::setw(18) << "policy" << std::right << std::setw(12) << "cost $"
     << std::setw(12) << "makespan h" << std::setw(10) << "switches" << std::setw(8) << "revoc"
     << std::setw(8) << "meas" << std::setw(12) << "explore $" << std::setw(10) << "waited h"
     << std::setw(11) << "vs oracle" << std::setw(10) << "deadline"
     << "\n";
  out << os.str();
}

// Prints the summary over runs (a median over no runs is NaN); returns it as JSON.
nlohmann::json PrintSummary(std::ostream& os, const Totals& t) {
  os << "summary over " << t.saving_fixed.size() << " runs (median cost / oracle cost):\n";
  for (auto& [policy, v] : t.rel_by_policy)
    os << "  " << std::left << std::setw(18) << policy << std::right << std::setprecision(3)
       << Median(v) << "x oracle cost\n";
  auto p90_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty()
               ? NAN
               : v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(0.9 * v.size()) - 1))];
  };
  const double p90 = p90_of(t.rel_oracle), p90_bound = p90_of(t.rel_oracle_bound);
  os << "  cloudtune: cost vs oracle " << std::setprecision(4) << Median(t.rel_oracle) << "x (p90 "
     << p90 << "x; " << t.rel_oracle.size() << " runs with the cost goal; vs the oracle's bound "
     << Median(t.rel_oracle_bound) << "x, p90 " << p90_bound
     << "x), vs the best fixed configuration in hindsight " << Median(t.vs_hindsight_fixed)
     << "x; saving vs fixed on-demand " << std::setprecision(1) << 100 * Median(t.saving_fixed)
     << "%, vs fixed spot " << 100 * Median(t.saving_spot) << "%, exploration "
     << std::setprecision(2) << 100 * Median(t.explore_share) << "% of its cost (max "
     << 100 * *std::max_element(t.explore_share.begin(), t.explore_share.end()) << "%)\n";
  if (!t.time_vs_oracle.empty())
    os << "  time goal: cloudtune makespan / oracle makespan " << std::setprecision(3)
       << Median(t.time_vs_oracle) << "x (median of " << t.time_vs_oracle.size()
       << " runs; vs the oracle's bound " << Median(t.time_vs_oracle_bound) << "x)\n";
  os << "  deadline or budget missed, or not finished (runs):";
  for (const auto& [policy, n] : t.misses) os << " " << policy << " " << n << ";";
  if (t.misses.empty()) os << " none";
  os << " cloudtune missed where the oracle met: " << t.oracle_met_cloudtune_missed << "\n";
  if (!t.vs_uniform.empty() || t.uniform_met_cloudtune_missed)
    os << "  deadline runs: cloudtune cost / uniform-progress cost " << std::setprecision(3)
       << Median(t.vs_uniform) << "x (median of " << t.vs_uniform.size()
       << " runs with the same deadline outcome); uniform-progress met "
       << "where cloudtune missed: " << t.uniform_met_cloudtune_missed << "\n";
  if (!t.vs_one_type.empty())
    os << "  mixed clusters: cloudtune cost / cloudtune-one-type cost " << std::setprecision(3)
       << Median(t.vs_one_type) << "x (median of " << t.vs_one_type.size() << " runs; min "
       << *std::min_element(t.vs_one_type.begin(), t.vs_one_type.end()) << "x, max "
       << *std::max_element(t.vs_one_type.begin(), t.vs_one_type.end()) << "x); ran a mixed "
       << "cluster in " << t.mixed_runs << " runs; met where one-type missed "
       << t.mixed_met_one_type_missed << ", missed where one-type met "
       << t.one_type_met_mixed_missed << "\n";
  nlohmann::json miss = nlohmann::json::object();
  for (const auto& [policy, n] : t.misses) miss[policy] = n;
  return {{"cloudtune_cost_vs_oracle_median", Median(t.rel_oracle)},
          {"cloudtune_cost_vs_hindsight_fixed_median", Median(t.vs_hindsight_fixed)},
          {"cloudtune_makespan_vs_oracle_time_goal_median", Median(t.time_vs_oracle)},
          {"cloudtune_cost_vs_oracle_p90", p90},
          {"cloudtune_cost_vs_oracle_bound_median", Median(t.rel_oracle_bound)},
          {"cloudtune_cost_vs_oracle_bound_p90", p90_bound},
          {"cloudtune_makespan_vs_oracle_bound_time_goal_median", Median(t.time_vs_oracle_bound)},
          {"cloudtune_saving_vs_fixed_median", Median(t.saving_fixed)},
          {"cloudtune_saving_vs_fixed_spot_median", Median(t.saving_spot)},
          {"cloudtune_exploration_share_median", Median(t.explore_share)},
          {"missed_runs", miss},
          {"cloudtune_missed_where_oracle_met", t.oracle_met_cloudtune_missed},
          {"cloudtune_cost_vs_uniform_progress_median", Median(t.vs_uniform)},
          {"uniform_progress_met_where_cloudtune_missed", t.uniform_met_cloudtune_missed},
          {"cloudtune_cost_vs_one_type_median", Median(t.vs_one_type)},
          {"cloudtune_runs_with_a_mixed_cluster", t.mixed_runs}};
}

}  // namespace

void RegisterReplayCommand(CLI::App& app) {
  auto* rep = app.add_subcommand(
      "replay", "Simulate jobs over measured traces: cloudtune vs an oracle and baselines");
  struct RepArgs {
    std::vector<std::string> scenarios;
    std::vector<uint64_t> seeds;
    std::string format = "table", out;
    bool oracle_schedule = false, schedules = false;
    std::string carry;
    int oracle_levels = replay::OracleOptions{}.levels;
    unsigned jobs = 0;
  };
  auto pa = std::make_shared<RepArgs>();
  rep->add_option("scenario", pa->scenarios, "Scenario JSON file(s)")->required();
  rep->add_option("--seeds", pa->seeds, "Override the scenario seeds");
  rep->add_option("--format", pa->format, "table or json (default table)");
  rep->add_option("-o,--output", pa->out, "Write to this file instead of stdout");
  rep->add_flag("--oracle-schedule", pa->oracle_schedule, "Print the hindsight oracle's schedule");
  rep->add_option("--carry", pa->carry,
                  "Override the scenarios' measured state carried across batch changes: metric "
                  "(best validation metric) or progress (the runs' progress column)");
  rep->add_option("--oracle-levels", pa->oracle_levels,
                  "Progress levels of the hindsight oracle (finer: a tighter lower bound, time "
                  "and memory in proportion; its schedule hardly depends on them; a run whose "
                  "constraints these levels cannot resolve is solved again at up to 8x)")
      ->check(CLI::Range(2, 100000));
  rep->add_option(
      "-j,--jobs", pa->jobs,
      "Threads: the runs (every seed of every scenario) replayed at once and the oracle's "
      "tables (0 = one per CPU core; the output is the same)");
  rep->add_flag("--schedules", pa->schedules,
                "Print every policy's schedule (its configurations and when it changed them; "
                "implies --oracle-schedule)");
  rep->callback([pa]() {
    if (pa->format != "json" && pa->format != "table")
      throw InputError("--format: '" + pa->format + "' (expected table or json)");
    std::ostringstream os;
    nlohmann::json jr;
    jr["schema"] = "cloudtune.replay/1";
    jr["runs"] = nlohmann::json::array();
    Totals t;
    auto scenarios = LoadAll(pa->scenarios, pa->seeds, pa->carry);
    replay::OracleOptions oo;
    oo.schedule = pa->oracle_schedule || pa->schedules;
    oo.levels = pa->oracle_levels;
    oo.threads = pa->jobs;
    RunAll(&scenarios, oo, pa->jobs);
    for (const auto& sr : scenarios) {
      const replay::Scenario& s = sr->scenario;
      const auto& seeds = sr->seeds;
      for (size_t si = 0; si < seeds.size(); ++si) {
        const uint64_t seed = seeds[si];
        const auto& res = sr->results[si];
        double oracle = 0, oracle_lower = 0, oracle_lower_h = 0, fixed = 0, fixed_spot = 0;
        double cloudtune = 0, up = 0;
        double hindsight_fixed = 0, oracle_h = 0, cloudtune_h = 0;
        int oracle_levels = 0;
        bool oracle_met = true, cloudtune_met = true, up_met = true;
        const replay::PolicyResult *one_type = nullptr, *ct = nullptr;
        for (auto& r : res) {
          if (r.policy == "oracle") {
            oracle = r.cost, oracle_lower = r.cost_lower, oracle_h = r.makespan_h;
            oracle_lower_h = r.makespan_lower_h;
            oracle_levels = r.levels;
            oracle_met = r.finished && r.deadline_met && r.budget_met;
          }
          if (r.policy == "fixed-on-demand") fixed = r.cost;
          if (r.policy == "fixed-spot" && r.finished) fixed_spot = r.cost;
          if (r.policy == "cloudtune")
            cloudtune = r.cost, cloudtune_met = r.finished && r.deadline_met,
            cloudtune_h = r.makespan_h;
          if (r.policy == "hindsight-fixed") hindsight_fixed = r.cost;
          if (r.policy == "uniform-progress") up = r.cost, up_met = r.finished && r.deadline_met;
          if (r.policy == "cloudtune-one-type") one_type = &r;
          if (r.policy == "cloudtune") ct = &r;
        }
        if (one_type && ct) TallyMixed(*ct, *one_type, &t);
        if (up > 0 && up_met == cloudtune_met) t.vs_uniform.push_back(cloudtune / up);
        const bool time_goal = s.objective.goal == core::Goal::kTime;
        // Against an oracle that finished: one that found no schedule has no makespan to match.
        if (time_goal && oracle_met && oracle_h > 0) {
          t.time_vs_oracle.push_back(cloudtune_h / oracle_h);
          if (oracle_lower_h > 0) t.time_vs_oracle_bound.push_back(cloudtune_h / oracle_lower_h);
        }
        if (!time_goal && hindsight_fixed > 0)
          t.vs_hindsight_fixed.push_back(cloudtune / hindsight_fixed);
        if (up > 0 && up_met && !cloudtune_met) ++t.uniform_met_cloudtune_missed;
        PrintRunHeader(os, s, seed);
        nlohmann::json run = {
            {"scenario", s.name}, {"seed", seed}, {"policies", nlohmann::json::array()}};
        for (auto& r : res) {
          // A policy that never reaches the target buys nothing at any cost: infinitely dear (and
          // it has missed whatever it was asked, a constraint or not).
          const double rel = !(oracle > 0) ? NAN : r.finished ? r.cost / oracle : kInfinity;
          const bool met = r.finished && r.deadline_met && r.budget_met;
          t.rel_by_policy[r.policy].push_back(rel);
          os << std::left << std::setw(18) << r.policy << std::right << std::fixed
             << std::setprecision(2) << std::setw(12) << r.cost << std::setw(12) << r.makespan_h
             << std::setw(10) << r.switches << std::setw(8) << r.revocations << std::setw(8)
             << r.measurements << std::setw(12) << r.exploration_cost << std::setw(10) << r.waited_h
             << std::setw(10) << std::setprecision(3) << rel << "x" << std::setw(10)
             << (s.objective.deadline_h > 0 || s.objective.budget_usd > 0 ? (met ? "met" : "MISSED")
                                                                          : "-")
             << (r.finished ? "" : "  (did not finish)") << "\n";
          if (!met) ++t.misses[r.policy];
          run["policies"].push_back(PolicyJson(r, rel));
          if (r.policy == "cloudtune") {
            if (s.objective.goal != core::Goal::kTime) {
              t.rel_oracle.push_back(rel);
              if (oracle > 0 && oracle_lower > 0)
                t.rel_oracle_bound.push_back(r.finished ? r.cost / oracle_lower : kInfinity);
            }
            t.saving_fixed.push_back(r.finished ? 1 - r.cost / fixed : -kInfinity);
            if (fixed_spot > 0)
              t.saving_spot.push_back(r.finished ? 1 - r.cost / fixed_spot : -kInfinity);
            t.explore_share.push_back(r.cost > 0 ? r.exploration_cost / r.cost : 0.0);
            if (oracle_met && !met) ++t.oracle_met_cloudtune_missed;
          }
        }
        jr["runs"].push_back(run);
        if (oracle > 0 && !time_goal)
          os << "oracle: a schedule it can follow costs $" << std::setprecision(2) << oracle
             << "; no schedule of its model costs less than $" << oracle_lower << " (gap "
             << std::setprecision(1) << 100 * (oracle / std::max(1e-12, oracle_lower) - 1) << "%, "
             << oracle_levels << " progress levels)\n";
        if (oracle > 0 && time_goal)
          os << "oracle: a schedule it can follow takes " << std::setprecision(2) << oracle_h
             << " h ($" << oracle << "); no schedule of its model within the budget finishes "
             << "sooner than " << oracle_lower_h << " h (gap " << std::setprecision(1)
             << 100 * (oracle_h / std::max(1e-12, oracle_lower_h) - 1) << "%, " << oracle_levels
             << " progress levels)\n";
        for (auto& r : res)
          if (pa->schedules || r.policy == "oracle" || r.policy == "hindsight-fixed")
            for (const auto& line : r.schedule) os << "  " << r.policy << " from " << line << "\n";
        os << "\n";
      }
    }
    jr["summary"] = PrintSummary(os, t);
    Output(pa->out, pa->format == "json" ? jr.dump(2) + "\n" : os.str());
  });
}

}  // namespace cloudtune::cli
