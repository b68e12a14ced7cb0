// cloudtune replay: jobs replayed over measured traces (cli/replay/replay.h).
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/replay/replay.h"
#include "estimator/core/error.h"
#include "estimator/core/stats.h"

namespace cloudtune::cli {

using core::Median;

void RegisterReplayCommand(CLI::App& app) {
  auto* rep = app.add_subcommand(
      "replay", "Simulate jobs over measured traces: cloudtune vs an oracle and baselines");
  struct RepArgs {
    std::vector<std::string> scenarios;
    std::vector<uint64_t> seeds;
    std::string format = "table", out;
  };
  auto pa = std::make_shared<RepArgs>();
  rep->add_option("scenario", pa->scenarios, "Scenario JSON file(s)")->required();
  rep->add_option("--seeds", pa->seeds, "Override the scenario seeds");
  rep->add_option("--format", pa->format, "table or json (default table)");
  rep->add_option("-o,--output", pa->out, "Write to this file instead of stdout");
  rep->callback([pa]() {
    if (pa->format != "json" && pa->format != "table")
      throw InputError("--format: '" + pa->format + "' (expected table or json)");
    std::ostringstream os;
    nlohmann::json jr;
    jr["schema"] = "cloudtune.replay/1";
    jr["runs"] = nlohmann::json::array();
    std::vector<double> rel_oracle, saving_fixed, explore_share;
    std::map<std::string, std::vector<double>> rel_by_policy;
    Progress progress("replay", static_cast<int>(pa->scenarios.size()));
    int scenario_index = 0;
    for (const auto& path : pa->scenarios) {
      ++scenario_index;
      progress.Step(scenario_index, "loading " + path);
      replay::Scenario s = replay::LoadScenario(path);
      const auto seeds = pa->seeds.empty() ? s.seeds : pa->seeds;
      for (uint64_t seed : seeds) {
        progress.Step(scenario_index, s.name + " seed " + std::to_string(seed));
        auto res = replay::RunReplay(s, seed);
        double oracle = 0, fixed = 0;
        for (auto& r : res) {
          if (r.policy == "oracle") oracle = r.cost;
          if (r.policy == "fixed-on-demand") fixed = r.cost;
        }
        os << "scenario " << s.name << "  seed " << seed << "  (target progress "
           << s.target_progress << " B0-steps, " << s.candidates.size()
           << " traced configurations)\n";
        os << std::left << std::setw(18) << "policy" << std::right << std::setw(12) << "cost $"
           << std::setw(12) << "makespan h" << std::setw(10) << "switches" << std::setw(8)
           << "revoc" << std::setw(8) << "meas" << std::setw(12) << "explore $" << std::setw(11)
           << "vs oracle"
           << "\n";
        nlohmann::json run = {
            {"scenario", s.name}, {"seed", seed}, {"policies", nlohmann::json::array()}};
        for (auto& r : res) {
          const double rel = oracle > 0 ? r.cost / oracle : NAN;
          rel_by_policy[r.policy].push_back(rel);
          os << std::left << std::setw(18) << r.policy << std::right << std::fixed
             << std::setprecision(2) << std::setw(12) << r.cost << std::setw(12) << r.makespan_h
             << std::setw(10) << r.switches << std::setw(8) << r.revocations << std::setw(8)
             << r.measurements << std::setw(12) << r.exploration_cost << std::setw(10)
             << std::setprecision(3) << rel << "x" << (r.finished ? "" : "  (did not finish)")
             << "\n";
          run["policies"].push_back({{"policy", r.policy},
                                     {"cost_usd", r.cost},
                                     {"makespan_h", r.makespan_h},
                                     {"switches", r.switches},
                                     {"revocations", r.revocations},
                                     {"measurements", r.measurements},
                                     {"exploration_cost_usd", r.exploration_cost},
                                     {"cost_vs_oracle", rel},
                                     {"finished", r.finished}});
          if (r.policy == "cloudtune") {
            rel_oracle.push_back(rel);
            saving_fixed.push_back(1 - r.cost / fixed);
            explore_share.push_back(r.exploration_cost / r.cost);
          }
        }
        jr["runs"].push_back(run);
        os << "\n";
      }
    }
    os << "summary over " << rel_oracle.size() << " runs (median):\n";
    for (auto& [policy, v] : rel_by_policy)
      os << "  " << std::left << std::setw(18) << policy << std::right << std::setprecision(3)
         << Median(v) << "x oracle cost\n";
    os << "  cloudtune: cost vs oracle " << std::setprecision(4) << Median(rel_oracle)
       << "x, saving vs fixed on-demand " << std::setprecision(1) << 100 * Median(saving_fixed)
       << "%, exploration " << std::setprecision(2) << 100 * Median(explore_share)
       << "% of its cost (max "
       << 100 * *std::max_element(explore_share.begin(), explore_share.end()) << "%)\n";
    jr["summary"] = {{"cloudtune_cost_vs_oracle_median", Median(rel_oracle)},
                     {"cloudtune_saving_vs_fixed_median", Median(saving_fixed)},
                     {"cloudtune_exploration_share_median", Median(explore_share)}};
    Output(pa->out, pa->format == "json" ? jr.dump(2) + "\n" : os.str());
  });
}

}  // namespace cloudtune::cli
