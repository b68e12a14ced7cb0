// cloudtune recommend / replay.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "estimator/error.h"
#include "estimator/trace.h"
#include "search/recommend.h"
#include "search/replay.h"

namespace cloudtune::cli {

namespace {

double ParseNumber(const std::string& s, const std::string& what) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !std::isfinite(v))
    throw InputError(what + ": '" + s + "' is not a number");
  return v;
}

// --gns grad_sqr,grad_var,B0  or a JSON file (a NoiseState object or an EfficiencyModel).
void ParseGns(const std::string& arg, search::RecommendRequest* req) {
  if (arg.find(',') != std::string::npos) {
    std::vector<std::string> parts;
    std::stringstream ss(arg);
    std::string p;
    while (std::getline(ss, p, ',')) parts.push_back(p);
    if (parts.size() != 3)
      throw InputError("--gns: expected grad_sqr,grad_var,B0, got '" + arg + "'");
    estimator::NoiseState n;
    n.grad_sqr = ParseNumber(parts[0], "--gns grad_sqr");
    n.grad_var = ParseNumber(parts[1], "--gns grad_var");
    n.base_batch = ParseNumber(parts[2], "--gns B0");
    if (n.grad_sqr < 0 || n.grad_var < 0 || n.base_batch <= 0)
      throw InputError("--gns: grad_sqr and grad_var must be >= 0 and B0 > 0");
    req->noise = n;
    return;
  }
  std::ifstream f(arg);
  if (!f) throw InputError(arg + ": cannot open");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw InputError(arg + ": not JSON: " + e.what());
  }
  if (j.contains("grad_sqr")) {
    estimator::NoiseState n;
    for (const char* k : {"grad_sqr", "grad_var", "base_batch"})
      if (!j.contains(k) || !j[k].is_number())
        throw InputError(arg + ": " + k + ": missing or not a number");
    n.grad_sqr = j["grad_sqr"].get<double>();
    n.grad_var = j["grad_var"].get<double>();
    n.base_batch = j["base_batch"].get<double>();
    if (n.grad_sqr < 0 || n.grad_var < 0 || n.base_batch <= 0)
      throw InputError(arg + ": grad_sqr and grad_var must be >= 0 and base_batch > 0");
    req->noise = n;
  } else {
    req->efficiency = estimator::EfficiencyModel::FromJson(j, arg);
  }
}

// TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]]
search::Config ParseConfig(const std::string& s) {
  std::vector<std::string> p;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ':')) p.push_back(x);
  if (p.size() < 4 || p.size() > 6)
    throw InputError(
        "--current: expected TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]], "
        "got '" +
        s + "'");
  search::Config c;
  c.type = p[0];
  auto integer = [&](const std::string& v, const char* what, int min) {
    double d = ParseNumber(v, std::string("--current ") + what);
    if (d < min || d != std::floor(d))
      throw InputError(std::string("--current ") + what + ": '" + v +
                       "' must be an integer >= " + std::to_string(min));
    return static_cast<int>(d);
  };
  c.nodes = integer(p[1], "nodes", 1);
  c.gpus_per_node = integer(p[2], "gpus_per_node", 1);
  c.local_bsz = integer(p[3], "local_bsz", 1);
  if (p.size() > 4) c.accum_steps = integer(p[4], "accum", 0);
  if (p.size() > 5 && !search::ParsePurchase(p[5], &c.purchase))
    throw InputError("--current purchase: '" + p[5] + "' (expected on-demand, spot or anchor)");
  return c;
}

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void RegisterSearchCommands(CLI::App& app) {
  // ---- recommend ----
  auto* rec = app.add_subcommand(
      "recommend", "Recommend a configuration from a measured profile (JSON or a table)");
  struct RecArgs {
    std::vector<std::string> profile;
    std::string gns, catalog, objective = "cost", format = "json", current, type, out;
    double deadline = 0, budget = 0, target = 0, progress = 0, spent = 0, explored = 0;
    int max_nodes = 16, max_local_bsz = 256, min_local_bsz = 8, max_accum = 3;
    bool pareto = false;
  };
  auto ra = std::make_shared<RecArgs>();
  rec->add_option("--profile", ra->profile, "Measured profile trace CSV(s)")->required();
  rec->add_option("--gns", ra->gns,
                  "Gradient noise: grad_sqr,grad_var,B0 or a JSON file (noise state or "
                  "efficiency model)")
      ->required();
  rec->add_option("--catalog", ra->catalog,
                  "Catalog CSV replacing the embedded one (prefix '+' to extend it); default "
                  "$CLOUDTUNE_CATALOG");
  rec->add_option("--objective", ra->objective, "cost or time (default cost)");
  rec->add_option("--deadline", ra->deadline, "Deadline in hours (0 = none)");
  rec->add_option("--budget", ra->budget, "Budget in USD (0 = none)");
  rec->add_option("--target-progress", ra->target, "Target progress (B0-steps)")->required();
  rec->add_option("--progress", ra->progress, "Progress made so far (B0-steps, default 0)");
  rec->add_option("--spent", ra->spent,
                  "Spent so far in objective units (USD for cost, hours for time; default 0)");
  rec->add_option("--exploration-spent", ra->explored,
                  "Of --spent, the part spent on measurements (caps further exploration at 4% of "
                  "the expected total; default 0)");
  rec->add_option("--current", ra->current,
                  "Current configuration TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]] "
                  "(default: the profile's most-measured configuration, on demand)");
  rec->add_option("--instance-type", ra->type,
                  "Instance type of profile rows that have no instance_type column");
  rec->add_option("--max-nodes", ra->max_nodes, "Most instances (default 16)");
  rec->add_option("--min-local-bsz", ra->min_local_bsz, "Smallest per-GPU batch (default 8)");
  rec->add_option("--max-local-bsz", ra->max_local_bsz, "Largest per-GPU batch (default 256)");
  rec->add_option("--max-accum", ra->max_accum, "Most accumulation micro-steps (default 3)");
  rec->add_flag("--pareto", ra->pareto, "Add the (time, cost) Pareto front to the JSON");
  rec->add_option("--format", ra->format, "json or table (default json)");
  rec->add_option("-o,--output", ra->out, "Write to this file instead of stdout");
  rec->callback([ra]() {
    // Validated here (not by CLI11) so that every bad value gets "cloudtune: error: ..." and
    // exit 1.
    if (ra->objective != "cost" && ra->objective != "time")
      throw InputError("--objective: '" + ra->objective + "' (expected cost or time)");
    if (ra->format != "json" && ra->format != "table")
      throw InputError("--format: '" + ra->format + "' (expected json or table)");
    auto non_negative = [](double v, const char* flag) {
      if (!(v >= 0) || !std::isfinite(v)) {
        std::ostringstream m;
        m << flag << ": must be >= 0, got " << v;
        throw InputError(m.str());
      }
    };
    non_negative(ra->deadline, "--deadline");
    non_negative(ra->budget, "--budget");
    non_negative(ra->progress, "--progress");
    non_negative(ra->spent, "--spent");
    non_negative(ra->explored, "--exploration-spent");
    if (ra->explored > ra->spent) {
      std::ostringstream m;
      m << "--exploration-spent: " << ra->explored << " exceeds --spent " << ra->spent;
      throw InputError(m.str());
    }
    if (!(ra->target > 0) || !std::isfinite(ra->target)) {
      std::ostringstream m;
      m << "--target-progress: must be > 0, got " << ra->target;
      throw InputError(m.str());
    }
    search::Catalog catalog = search::ResolveCatalog(ra->catalog);
    search::RecommendRequest req;
    req.profile = estimator::ReadTraces(ra->profile);
    for (auto& m : req.profile)
      if (m.key.instance_type.empty()) m.key.instance_type = ra->type;
    ParseGns(ra->gns, &req);
    if (!ra->current.empty()) req.current = ParseConfig(ra->current);
    req.catalog = &catalog;
    auto& o = req.options;
    o.objective.goal = ra->objective == "time" ? search::Goal::kTime : search::Goal::kCost;
    o.objective.deadline_h = ra->deadline;
    o.objective.budget_usd = ra->budget;
    o.target_progress = ra->target;
    o.current_progress = ra->progress;
    o.spent = ra->spent;
    o.exploration_spent = ra->explored;
    o.space.max_nodes = ra->max_nodes;
    o.space.max_local_bsz = ra->max_local_bsz;
    o.space.min_local_bsz = ra->min_local_bsz;
    o.space.max_accum_steps = ra->max_accum;
    for (auto& m : req.profile)
      if (m.key.instance_type.empty() && !req.current)
        throw InputError("profile: rows have no instance_type: give --instance-type or --current");
    search::Recommendation r = search::Recommend(req);
    std::string text;
    if (ra->format == "table") {
      text = r.ToTable();
    } else {
      nlohmann::json j = r.ToJson();
      if (ra->pareto) {
        // The same problem Recommend solved, traced over the whole space.
        search::RecommendRequest q = req;
        search::ProfilePredictor pred(
            catalog,
            [&] {
              auto prof = q.profile;
              for (auto& m : prof)
                if (m.key.instance_type.empty())
                  m.key.instance_type = r.has_current ? r.current.config.type : "";
              return prof;
            }(),
            o.measured_sigma);
        auto eff = q.efficiency ? *q.efficiency : estimator::EfficiencyModel::FromNoise(*q.noise);
        search::SearchProblem p;
        p.catalog = &catalog;
        p.predictor.step_time = [&](const search::InstanceType& t, const search::Config& c) {
          return pred.StepTime(t, c);
        };
        p.predictor.steps = [&](double b) {
          auto s = eff.StepsToProgress(b, o.current_progress, o.target_progress);
          return search::Estimate{s.steps, s.log_sigma};
        };
        p.space = o.space;
        p.objective = o.objective;
        p.cost = o.cost;
        p.remaining_progress = o.target_progress - o.current_progress;
        search::Config cur = r.current.config;
        if (r.has_current) p.current = &cur;
        j["pareto"] = nlohmann::json::array();
        for (const auto& e : search::ParetoFront(p))
          j["pareto"].push_back(
              {{"description", e.config.ToString()}, {"hours", e.hours}, {"cost_usd", e.cost}});
      }
      text = j.dump(2) + "\n";
    }
    if (ra->out.empty())
      std::cout << text;
    else
      WriteFileAtomically(ra->out, text);
  });

  // ---- replay ----
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
    for (const auto& path : pa->scenarios) {
      search::Scenario s = search::LoadScenario(path);
      const auto seeds = pa->seeds.empty() ? s.seeds : pa->seeds;
      for (uint64_t seed : seeds) {
        auto res = search::RunReplay(s, seed);
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
    const std::string text = pa->format == "json" ? jr.dump(2) + "\n" : os.str();
    if (pa->out.empty())
      std::cout << text;
    else
      WriteFileAtomically(pa->out, text);
  });
}

}  // namespace cloudtune::cli
