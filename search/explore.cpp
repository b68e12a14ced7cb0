#include "search/explore.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "estimator/core/stats.h"
#include "search/format.h"

namespace cloudtune::search {

double ExpectedImprovement(double incumbent, double median, double sigma, double max_factor) {
  if (!(median > 0) || !std::isfinite(median) || !(incumbent > 0) || !(max_factor > 0)) return 0;
  // E[(a − bX) 1{X <= u}] with u = min(a / b, max_factor): the improvement is positive below a / b.
  const double u = std::min(incumbent / median, max_factor);
  if (sigma <= 1e-12) return u >= 1 ? std::max(0.0, incumbent - median) : 0.0;
  const double d = std::log(u) / sigma;
  return std::max(0.0, incumbent * core::NormalCdf(d) -
                           median * std::exp(0.5 * sigma * sigma) * core::NormalCdf(d - sigma));
}

namespace detail {

double Excess(const ObjectiveOptions& o, const Evaluation& e) {
  return o.ExpectedExcess(e.hours, e.cost, e.log_sigma);
}

namespace {
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// 7-point Gauss-Hermite rule for the standard normal.
constexpr double kGaussZ[] = {0.0,
                              1.1544053947399682,
                              -1.1544053947399682,
                              2.366759410734541,
                              -2.366759410734541,
                              3.750439717725742,
                              -3.750439717725742};
constexpr double kGaussW[] = {0.45714285714285713,  0.2401231786050127,   0.2401231786050127,
                              0.030757123967586498, 0.030757123967586498, 0.0005482688559722184,
                              0.0005482688559722184};

// What a measurement of e reveals: its step time, and, at a global batch beyond the largest the
// job has observed (SpaceOptions::observed_batch), the noise there too: the job records its
// gradient statistics at the batch it runs, so the steps' extrapolation beyond the observed batch
// (the growth term of the efficiency model, which grows with log(B / observed)) is resolved as
// well. The steps' spread at the observed batch (the noise's growth with progress, its sampling
// error) stays. Evaluate adds step time and steps in quadrature.
struct Revealed {
  double sigma = 0;        // the log uncertainty a measurement resolves
  double steps_sigma = 0;  // the steps' log uncertainty it leaves
  bool steps = false;      // the steps' extrapolation is part of `sigma`
};
Revealed Reveal(const SearchProblem& p, const Evaluation& e) {
  const double b = static_cast<double>(e.config.global_batch());
  const double s = p.predictor.steps(b).log_sigma;
  const double b_max = p.space.observed_batch;
  double beyond = 0;  // the steps' spread the extrapolation beyond b_max adds
  if (b_max > 0 && b > b_max * (1 + 1e-9)) {
    const double s0 = p.predictor.steps(b_max).log_sigma;
    beyond = std::sqrt(std::max(0.0, s * s - s0 * s0));
  }
  return {std::sqrt(std::max(0.0, e.log_sigma * e.log_sigma - s * s) + beyond * beyond),
          std::sqrt(std::max(0.0, s * s - beyond * beyond)), beyond > 0};
}

// Hours a measurement of e costs from `from`: going there and, should it disappoint, coming back,
// and the measurement window charged in full (conservative: it also makes progress).
double MeasurementHours(const SearchProblem& p, const RecommendOptions& options,
                        const Evaluation& e, const Evaluation& from) {
  const bool same_hw = e.config.SameHardware(from.config);
  const double sw = 2 * (same_hw ? p.cost.batch_switch_s : p.cost.switch_s);
  return (sw + options.measure_s) / 3600.0;
}

struct Exploration {
  const Evaluation* pick = nullptr;
  double gain = 0;    // expected reduction of the expected excess (relative units)
  double cost_x = 0;  // what the measurement adds to the excess (relative units)
  double cost = 0;    // the measurement's cost (objective units)
  Revealed revealed;  // what measuring the pick resolves
};

// When no candidate is predicted to meet the deadline or budget, measuring an instance type the
// job has not run may still find one that does: its step times are projected from other hardware
// (uncertain by up to a factor e), while a measured type's are predicted within a few percent and
// measuring more of it does not change what made every candidate miss. The value of measuring
// e: what a measurement reveals (Reveal; log-normal; the rest of the steps' spread stays), and
// the job keeps whichever of e and the incumbent is then expected to miss least; against it, what
// the measurement window and the switches there and back add to the excess. The pick pays for
// itself explore_ratio times over, within the exploration budget, with the most gain per unit of
// excess spent.
Exploration ExploreTowardTheConstraints(const SearchProblem& p, const RecommendOptions& options,
                                        const std::vector<Evaluation>& pool,
                                        const Evaluation& incumbent,
                                        const std::function<bool(const Config&)>& measured,
                                        double budget_left) {
  const ObjectiveOptions& o = p.objective;
  const double inc = Excess(o, incumbent);
  std::set<std::string> measured_types = {incumbent.config.type};
  if (p.current) measured_types.insert(p.current->type);
  for (const Evaluation& e : pool)
    if (measured(e.config)) measured_types.insert(e.config.type);
  Exploration best;
  double best_score = 0;
  for (const Evaluation& e : pool) {
    if (measured_types.count(e.config.type) || !std::isfinite(e.hours)) continue;
    const Revealed rv = Reveal(p, e);
    if (!(rv.sigma > 0)) continue;
    double after = 0;
    for (int i = 0; i < 7; ++i) {
      const double f = std::exp(rv.sigma * kGaussZ[i]);
      after +=
          kGaussW[i] * std::min(inc, o.ExpectedExcess(e.hours * f, e.cost * f, rv.steps_sigma));
    }
    const double gain = inc - after;
    const double t_h = MeasurementHours(p, options, e, incumbent);
    const double cost_x = (o.deadline_h > 0 ? t_h / o.deadline_h : 0.0) +
                          (o.budget_usd > 0 ? t_h * e.price_per_hour / o.budget_usd : 0.0);
    const double cost = o.goal == Goal::kCost ? t_h * e.price_per_hour : t_h;
    if (cost > budget_left) continue;
    if (!(gain - options.explore_ratio * cost_x > 0)) continue;
    const double score = gain / std::max(cost_x, 1e-12);
    if (score > best_score) {
      best_score = score;
      best = {&e, gain, cost_x, cost, rv};
    }
  }
  return best;
}
// Exploration toward the objective: is measuring an uncertain configuration worth it? The expected
// improvement of the objective (only outcomes that meet the deadline and budget count) against
// the measurement's cost, explore_ratio times over, within the exploration budget; safe: should
// the measurement disappoint, the incumbent must still meet them after paying for it.
Exploration ExploreForTheObjective(const SearchProblem& p, const RecommendOptions& options,
                                   const std::vector<Evaluation>& pool, const Evaluation& chosen,
                                   const std::function<bool(const Config&)>& measured,
                                   double total) {
  const Goal goal = p.objective.goal;
  const double incumbent = chosen.Objective(goal);
  Exploration best;
  double best_score = 0;
  for (const Evaluation& e : pool) {
    if (measured(e.config) || e.config == chosen.config) continue;
    const double v = e.Objective(goal);
    // A candidate predicted to miss the deadline or budget may meet them at a shorter step time
    // than predicted; the expected improvement counts only the outcomes that meet them.
    const double miss = p.objective.Miss(e.hours, e.cost, e.log_sigma);
    const double max_factor = miss > 0 ? 1 / miss : kInfinity;
    const Revealed rv = Reveal(p, e);
    const double ei = ExpectedImprovement(incumbent, v, rv.sigma, max_factor);
    if (ei <= 0) continue;
    const double t_h = MeasurementHours(p, options, e, chosen);
    const double mcost = goal == Goal::kCost ? t_h * e.price_per_hour : t_h;
    if (p.objective.Miss(chosen.hours + t_h, chosen.cost + t_h * e.price_per_hour,
                         chosen.log_sigma) > 1)
      continue;
    // The exploration budget (a share of the expected total: spent + best predicted rest).
    if (options.exploration_spent + mcost > options.exploration_budget_share * total) continue;
    // Among those that pay for themselves, the most improvement per unit spent (the greedy rule
    // under a budget).
    if (ei - options.explore_ratio * mcost <= 0) continue;
    const double score = ei / std::max(mcost, 1e-12);
    if (score > best_score) {
      best_score = score;
      best = {&e, ei, 0.0, mcost, rv};
    }
  }
  return best;
}

}  // namespace

void Explore(const SearchProblem& p, const RecommendOptions& options, const SearchResult& sr,
             double best_v, const std::function<bool(const Config&)>& measured, Recommendation* r,
             Evaluation* chosen, std::ostringstream* why) {
  const Goal goal = p.objective.goal;
  const double total = options.spent + std::min(chosen->Objective(goal), best_v);
  // What both explorations consider: the best candidates and the promising ones (SearchResult).
  std::vector<Evaluation> pool = sr.top;
  pool.insert(pool.end(), sr.promising.begin(), sr.promising.end());
  if (chosen->feasible) {
    const Exploration x = ExploreForTheObjective(p, options, pool, *chosen, measured, total);
    if (x.pick) {
      r->action = Recommendation::Action::kMeasure;
      r->expected_improvement = x.gain;
      r->measurement_cost = x.cost;
      std::ostringstream m;
      m << "explore: measuring " << x.pick->config.ToString() << " (predicted "
        << Value(goal, x.pick->Objective(goal), r->cost_unit)
        << (x.revealed.steps ? ", step time and steps ±" : ", step time ±") << std::fixed
        << std::setprecision(0) << 100 * x.revealed.sigma << "%) has expected improvement "
        << Value(goal, x.gain, r->cost_unit) << " > measurement cost "
        << Value(goal, x.cost, r->cost_unit) << "; otherwise: " << why->str();
      why->str(m.str());
      *chosen = *x.pick;
    }
  } else if (r->has_current) {
    const Exploration x = ExploreTowardTheConstraints(
        p, options, pool, *chosen, measured,
        options.exploration_budget_share * total - options.exploration_spent);
    if (x.pick) {
      r->action = Recommendation::Action::kMeasure;
      // In objective units at the measurement's own cost per unit of excess.
      r->expected_improvement = x.gain * x.cost / std::max(x.cost_x, 1e-12);
      r->measurement_cost = x.cost;
      std::ostringstream m;
      m << "explore: measuring " << x.pick->config.ToString()
        << (x.revealed.steps ? " (step time and steps ±" : " (step time ±") << std::fixed
        << std::setprecision(0) << 100 * x.revealed.sigma << "%) lowers the expected excess by "
        << std::setprecision(1) << 100 * x.gain << "% of the limit, more than "
        << options.explore_ratio << "x what the measurement adds (" << std::setprecision(2)
        << 100 * x.cost_x << "%); otherwise: " << why->str();
      why->str(m.str());
      *chosen = *x.pick;
    }
  }
}

}  // namespace detail
}  // namespace cloudtune::search
