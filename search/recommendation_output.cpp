// What a recommendation prints: its JSON record and its table.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "search/format.h"
#include "search/recommend.h"

namespace cloudtune::search {

std::string Hours(double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(x < 10 ? 3 : 2) << x << " h";
  return s.str();
}

std::string Value(Goal g, double x, CostUnit unit) {
  return g == Goal::kCost ? FormatCost(x, unit) : Hours(x);
}

namespace {

nlohmann::json ConfigJson(const Config& c) {
  return {{"instance_type", c.type},          {"nodes", c.nodes},
          {"gpus_per_node", c.gpus_per_node}, {"replicas", c.replicas()},
          {"local_bsz", c.local_bsz},         {"accum_steps", c.accum_steps},
          {"global_batch", c.global_batch()}, {"purchase", PurchaseName(c.purchase)}};
}

nlohmann::json Finite(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

nlohmann::json EvalJson(const Evaluation& e) {
  const double lo = std::exp(-e.log_sigma), hi = std::exp(e.log_sigma);
  return {{"config", ConfigJson(e.config)},
          {"description", e.config.ToString()},
          {"step_time_s", Finite(e.step_time_s)},
          {"throughput", Finite(e.throughput)},
          {"steps", Finite(e.steps)},
          {"goodput", Finite(e.goodput)},
          {"price_per_hour", Finite(e.price_per_hour)},
          {"hours", Finite(e.hours)},
          {"hours_range", {Finite(e.hours * lo), Finite(e.hours * hi)}},
          {"cost_usd", Finite(e.cost)},
          {"cost_range", {Finite(e.cost * lo), Finite(e.cost * hi)}},
          {"log_sigma", Finite(e.log_sigma)},
          {"switch_s", e.switch_s},
          {"expected_revocations", Finite(e.revocations)},
          {"checkpoint_interval_s", Finite(e.checkpoint_interval_s)},
          {"feasible", e.feasible}};
}

}  // namespace

const char* ActionName(Recommendation::Action a) {
  switch (a) {
    case Recommendation::Action::kKeep:
      return "keep";
    case Recommendation::Action::kSwitch:
      return "switch";
    case Recommendation::Action::kMeasure:
      return "measure";
  }
  return "?";
}

nlohmann::json Recommendation::ToJson() const {
  nlohmann::json j;
  j["schema"] = "cloudtune.recommendation/1";
  j["action"] = ActionName(action);
  j["objective"] = GoalName(goal);
  j["reason"] = reason;
  j["current"] = has_current ? EvalJson(current) : nlohmann::json();
  j["proposed"] = EvalJson(proposed);
  j["best_predicted"] = EvalJson(best);
  // What the job can take up without a restart (InProcessBatch).
  j["in_process"] = in_process ? EvalJson(*in_process) : nlohmann::json();
  if (bridge_cost > 0) j["bridge_cost"] = bridge_cost;
  if (action == Action::kMeasure) {
    j["expected_improvement"] = expected_improvement;
    j["measurement_cost"] = measurement_cost;
  }
  j["alternatives"] = nlohmann::json::array();
  for (const auto& a : alternatives) j["alternatives"].push_back(EvalJson(a));
  j["candidates_evaluated"] = evaluated;
  j["catalog"] = catalog_source;
  j["cost_unit"] = CostUnitName(cost_unit);
  if (mixed) {
    nlohmann::json m = {{"proposed", mixed->proposed},
                        {"keeps_current", mixed->keeps_current},
                        {"reason", mixed->reason},
                        {"clusters_evaluated", mixed->considered}};
    if (mixed->best) {
      const MixedEvaluation& e = *mixed->best;
      nlohmann::json parts = nlohmann::json::array();
      for (size_t i = 0; i < e.config.parts.size(); ++i) {
        const MixedPart& part = e.config.parts[i];
        parts.push_back({{"instance_type", part.type},
                         {"nodes", part.nodes},
                         {"gpus_per_node", part.gpus_per_node},
                         {"purchase", core::PurchaseName(part.purchase)},
                         {"local_bsz", i < e.local_bsz.size() ? e.local_bsz[i] : 0}});
      }
      m["best"] = {{"description", e.config.ToString()},
                   {"parts", parts},
                   {"global_batch", e.config.global_batch},
                   {"step_time_s", Finite(e.step_time_s)},
                   {"hours", Finite(e.hours)},
                   {"cost_usd", Finite(e.cost)},
                   {"log_sigma", Finite(e.log_sigma)},
                   {"feasible", e.feasible}};
    }
    if (mixed->best_single) m["best_single"] = EvalJson(*mixed->best_single);
    j["mixed"] = m;
  }
  return j;
}

std::string Recommendation::ToTable() const {
  std::ostringstream s;
  s << "action: " << ActionName(action) << "  (objective: " << GoalName(goal) << ")\n"
    << "reason: " << reason << "\n\n";
  size_t width = 16;  // the configuration column fits the longest description
  auto widen = [&](const Evaluation& e) {
    width = std::max(width, e.config.ToString().size() + 2);
  };
  if (has_current) widen(current);
  widen(proposed);
  const bool show_in_process = in_process && !(in_process->config == proposed.config) &&
                               !(has_current && in_process->config == current.config);
  if (show_in_process) widen(*in_process);
  for (const auto& a : alternatives) widen(a);
  const int w = static_cast<int>(width);
  s << std::left << std::setw(10) << "" << std::setw(w) << "configuration" << std::right
    << std::setw(14) << "hours" << std::setw(14) << "cost" << std::setw(9) << "±" << std::setw(12)
    << "goodput"
    << "\n";
  auto row = [&](const std::string& label, const Evaluation& e) {
    s << std::left << std::setw(10) << label << std::setw(w) << e.config.ToString() << std::right
      << std::setw(14) << Hours(e.hours) << std::setw(14) << FormatCost(e.cost, cost_unit)
      << std::setw(8) << std::fixed << std::setprecision(1) << 100 * e.log_sigma << "%"
      << std::setw(12) << std::setprecision(2) << e.goodput
      << (e.feasible ? "" : "  (misses a constraint)") << "\n";
  };
  if (has_current) row("current", current);
  row("proposed", proposed);
  if (show_in_process) row("in proc.", *in_process);  // the batch to run until a relaunch
  for (size_t i = 0; i < alternatives.size(); ++i)
    row("alt " + std::to_string(i + 1), alternatives[i]);
  s << "\n" << evaluated << " candidates evaluated; catalog: " << catalog_source << "\n";
  return s.str();
}

}  // namespace cloudtune::search
