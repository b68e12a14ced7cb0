#include "search/recommend.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "estimator/core/error.h"
#include "estimator/core/stats.h"
#include "estimator/mixed_cluster.h"
#include "search/explore.h"
#include "search/format.h"

namespace cloudtune::search {

bool RecommendOptions::IsValid(std::string* error) const {
  std::string sub;
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!space.IsValid(&sub)) return fail("space: " + sub);
  if (!objective.IsValid(&sub)) return fail("objective: " + sub);
  if (!cost.IsValid(&sub)) return fail("cost: " + sub);
  if (!(target_progress >= 0) || !std::isfinite(target_progress))
    return fail("target_progress must be >= 0");
  if (!(current_progress >= 0) || !std::isfinite(current_progress))
    return fail("current_progress must be >= 0");
  if (!(hysteresis >= 0) || !(hysteresis < 1)) return fail("hysteresis must be in [0, 1)");
  if (!(measure_s > 0) || !std::isfinite(measure_s)) return fail("measure_s must be > 0");
  if (!(decide_again_s >= 0) || !std::isfinite(decide_again_s))
    return fail("decide_again_s must be >= 0");
  if (!(explore_ratio >= 0) || !std::isfinite(explore_ratio))
    return fail("explore_ratio must be >= 0");
  if (explore_candidates < 1) return fail("explore_candidates must be >= 1");
  if (!(exploration_budget_share >= 0) || !(exploration_budget_share <= 1))
    return fail("exploration_budget_share must be in [0, 1]");
  if (!(spent >= 0) || !std::isfinite(spent) || !(exploration_spent >= 0) ||
      !(exploration_spent <= spent))
    return fail("spent and exploration_spent must be >= 0 with exploration_spent <= spent");
  if (!(measured_sigma >= 0) || !(steps_sigma_floor >= 0))
    return fail("measured_sigma and steps_sigma_floor must be >= 0");
  if (mixed_max_types != 0 && (mixed_max_types < 2 || mixed_max_types > 3))
    return fail("mixed_max_types must be 0 (off), 2 or 3");
  return true;
}

LaunchAdvice AdviseLaunch(const InstanceType& type, int nodes, const ObjectiveOptions& objective,
                          const CostOptions& cost) {
  LaunchAdvice a;
  if (objective.goal != Goal::kCost) {
    a.reason = "on demand: the objective is time";
    return a;
  }
  if (objective.deadline_h > 0) {
    a.reason = "on demand: a deadline, and the job's length is not known yet";
    return a;
  }
  if (!type.has_spot()) {
    a.reason = "on demand: " + type.name + " has no spot offer in the catalog";
    return a;
  }
  const double od = HourlyPrice(type, nodes, Purchase::kOnDemand);
  const RunEstimate spot = EstimateRun(
      1.0, HourlyPrice(type, nodes, Purchase::kSpot),
      ClusterRevocationRate(type, nodes, Purchase::kSpot), cost.checkpoint_s, cost.restart_s,
      std::numeric_limits<double>::infinity(), cost.SavesOnNotice(cost.checkpoint_s));
  std::ostringstream r;
  r << std::fixed << std::setprecision(2) << "$" << spot.cost << " per hour of work on spot ("
    << std::setprecision(1) << 100 * spot.overhead << "% for its expected revocations) vs $"
    << std::setprecision(2) << od << " on demand";
  if (spot.cost < od) {
    a.purchase = Purchase::kSpot;
    a.reason = "spot: " + r.str();
  } else {
    a.reason = "on demand: " + r.str();
  }
  return a;
}

std::optional<Config> InProcessBatch(const Recommendation& r, const Config& running) {
  if (!r.in_process || !r.in_process->config.SameHardware(running)) return {};
  return r.in_process->config;
}

namespace {
estimator::CrossTypeThroughputModel FitProfile(const Catalog& catalog,
                                               const std::vector<core::Measurement>& profile,
                                               const estimator::ThroughputFitOptions& fit,
                                               double gradient_bytes) {
  std::map<std::string, estimator::Hardware> hardware;
  for (const auto& m : profile)
    hardware.emplace(m.key.instance_type, HardwareOf(catalog, m.key.instance_type));
  estimator::CrossTypeFitOptions options;
  options.fit = fit;
  options.gradient_bytes = gradient_bytes;
  return estimator::FitCrossType(profile, hardware, options);
}
}  // namespace

ProfilePredictor::ProfilePredictor(const Catalog& catalog,
                                   const std::vector<core::Measurement>& profile,
                                   double measured_sigma,
                                   const estimator::ThroughputFitOptions& fit,
                                   double gradient_bytes)
    : catalog_(catalog),
      measured_sigma_(measured_sigma),
      model_(FitProfile(catalog, profile, fit, gradient_bytes)) {
  for (const auto& m : profile) measured_[m.key] = m.step_time;
}

Estimate ProfilePredictor::StepTime(const InstanceType& t, const Config& c) const {
  const core::ConfigKey key = c.Key();
  auto m = measured_.find(key);
  if (m != measured_.end()) return {m->second, measured_sigma_};
  const estimator::Hardware hw = HardwareOf(catalog_, t.name);
  if (!model_.Measured(t.name) && !hw.known()) return {0, 0};  // cannot be projected
  const estimator::StepPrediction p = model_.Predict(key, hw, c.gpus_per_node);
  return {p.step_time, std::max(p.log_sigma, measured_sigma_)};
}

namespace {
constexpr double kInfinity = std::numeric_limits<double>::infinity();
using detail::Excess;
// Within the generated space's memory limits (local batch, accumulation); explicit candidates
// (a replay's traced configurations) are what can run, and the limits do not apply to them.
bool Runnable(const SearchProblem& p, const Evaluation& e) {
  return !p.candidates.empty() || (e.config.local_bsz <= p.space.max_local_bsz &&
                                   e.config.accum_steps <= p.space.max_accum_steps);
}

// Recommendation::in_process when the proposal needs a restart: the best batch on the current
// hardware if it beats the current one beyond the hysteresis (or the current one cannot run: over
// the space's local batch or accumulation limit), else the current one.
Evaluation BestInProcess(const SearchProblem& p, const RecommendOptions& options,
                         const std::optional<Evaluation>& same, const Evaluation& current) {
  if (!same || same->config == current.config) return current;
  if (!Runnable(p, current)) return *same;
  if (same->feasible != current.feasible) return same->feasible ? *same : current;
  const double cur =
      current.feasible ? current.Objective(p.objective.goal) : Excess(p.objective, current);
  const double alt =
      same->feasible ? same->Objective(p.objective.goal) : Excess(p.objective, *same);
  return cur - alt > options.hysteresis * cur ? *same : current;
}

// RecommendOptions::decide_again_s: the configuration the job can fall back on when the current one
// overruns the budget only on its own estimate, or nullopt when it must leave now.
std::optional<Evaluation> BudgetFallback(const SearchProblem& p, const RecommendOptions& options,
                                         const SearchResult& sr, const Evaluation& current) {
  const ObjectiveOptions& o = p.objective;
  if (!(o.budget_usd > 0) || !(options.decide_again_s > 0) ||
      o.DeadlineMiss(current.hours, current.log_sigma) > 1 ||
      o.BudgetMiss(current.hours, current.cost, current.log_sigma) > 1 + options.hysteresis)
    return std::nullopt;
  const Evaluation* fallback = nullptr;
  for (const Evaluation& e : sr.top)
    if (e.feasible && !(e.config == current.config) && (!fallback || e.cost < fallback->cost))
      fallback = &e;
  if (!fallback) return std::nullopt;
  const double window_h = options.decide_again_s / 3600;
  const double hours = fallback->hours + window_h;
  const double cost = fallback->cost + current.price_per_hour * window_h;
  if (o.Miss(hours, cost, fallback->log_sigma) > 1) return std::nullopt;
  return *fallback;
}

// A configuration that misses the deadline on its own, run while a fallback still covers it.
struct Bridge {
  Evaluation run;       // what runs until the fallback must start (deciding again meanwhile)
  Evaluation fallback;  // what can still finish in time after it
  double stay_h = 0;    // the longest stay on `run` the fallback covers (>= one window)
  double cost = 0;      // expected cost of the two over that stay, its progress counted
  // ProgressBridge: the share of the progress still to make at which the plan's cost is lowest
  // (the fallback finishes the rest); 0 for DeadlineBridge, whose fallback must cover a stay that
  // made no progress.
  double share = 0;
};

// The hysteresis favours the plan the job follows, as it does the current configuration: a new
// stay on `run` at `cost` must save more than its share of `chosen`'s cost, and the stay the job is
// on (not when staying is a relaunch) ends only when leaving it saves more than that share of its
// own.
bool BridgeWorthIt(const SearchProblem& p, const RecommendOptions& options, const Evaluation& run,
                   const Evaluation& chosen, double cost) {
  const bool on_it = p.current && !p.relaunch_current && run.config == *p.current;
  return on_it ? chosen.cost > (1 - options.hysteresis) * cost
               : chosen.cost - cost > options.hysteresis * chosen.cost;
}

// RecommendOptions::decide_again_s under a deadline (the cost goal): the pair of a candidate of
// SearchResult::deadline_bridges and an on-demand configuration that meets the deadline (the
// fallback) with the lowest expected cost below `chosen`'s, when the candidate runs as long as the
// fallback, switched to after it, still meets the deadline and budget (margins included) even if
// that stay made no progress at all (its spot nodes revoked at once, say), and the fallback
// finishes the rest. The fallback is on demand because spot capacity may be gone by then. The job
// decides again every window and stays while this holds, so the stay, not one window, is what the
// pair saves over: a faster fallback leaves a longer stay on the cheaper configuration, which can
// make the pair cheaper than with the cheapest fallback. The stay is at least one window (the
// job cannot leave sooner). A new stay must save more than the hysteresis share of `chosen`'s cost,
// as any switch must; the stay the job is on ends only when leaving it saves more than that share
// of the stay's own cost, so that estimates which move by less do not flip the job between the
// two. A spot shortage must be what makes `chosen` dear (below). nullopt when none.
std::optional<Bridge> DeadlineBridge(const SearchProblem& p, const RecommendOptions& options,
                                     const SearchResult& sr, const Evaluation& chosen,
                                     const SearchResult* unlimited) {
  const ObjectiveOptions& o = p.objective;
  if (o.goal != Goal::kCost || !(o.deadline_h > 0) || !(options.decide_again_s > 0) ||
      !chosen.feasible || !(chosen.hours > 0))
    return std::nullopt;
  const double window_h = options.decide_again_s / 3600;
  std::optional<Bridge> best;
  for (const Evaluation& fallback : sr.top) {
    if (!fallback.feasible || fallback.config.purchase != Purchase::kOnDemand ||
        !(fallback.hours > 0))
      continue;
    const double fb_train_h = std::max(0.0, fallback.hours - fallback.switch_s / 3600);
    const double fb_rate = fallback.cost / fallback.hours;
    for (const Evaluation& c : sr.deadline_bridges) {
      if (!Runnable(p, c) || !(c.hours > 0) || !(c.cost < chosen.cost)) continue;
      const double back_h =
          (fallback.config.SameHardware(c.config) ? p.cost.batch_switch_s : p.cost.switch_s) / 3600;
      const double c_rate = c.cost / c.hours;  // switch and expected revocations included
      auto covered = [&](double stay_h) {
        return o.Miss(stay_h + back_h + fb_train_h,
                      c_rate * stay_h + fb_rate * (back_h + fb_train_h), fallback.log_sigma) <= 1;
      };
      if (!covered(window_h)) continue;
      // The longest covered stay (Miss grows with it), no longer than c needs to finish.
      double stay_h = window_h, hi = std::max(window_h, c.hours);
      if (covered(hi)) {
        stay_h = hi;
      } else {
        for (int i = 0; i < 40; ++i) {
          const double mid = 0.5 * (stay_h + hi);
          (covered(mid) ? stay_h : hi) = mid;
        }
      }
      const double c_train_h = std::max(1e-9, c.hours - c.switch_s / 3600);
      const double done = std::clamp((stay_h - c.switch_s / 3600) / c_train_h, 0.0, 1.0);
      const double cost = c_rate * stay_h + fb_rate * (back_h + fb_train_h * (1 - done));
      if (BridgeWorthIt(p, options, c, chosen, cost) && (!best || cost < best->cost))
        best = Bridge{c, fallback, stay_h, cost};
    }
  }
  if (!best || p.space.spot_nodes_available.empty()) return std::nullopt;
  // Only through a spot shortage: with all the spot capacity it wants, the job would meet the
  // deadline for less than `chosen`. Otherwise the slack is better kept: spending it on a slower
  // configuration leaves the rest to a faster one, dearer per unit of progress, at the deadline's
  // edge, where an estimate that moves forces a dearer one still. (ProgressBridge counts what the
  // stay does of the way and the noise each part sees, which this rule, pricing the stay as no
  // progress, cannot.)
  SearchResult own;
  if (!unlimited) {
    SearchProblem q = p;
    q.space.spot_nodes_available.clear();
    q.keep_top = 1;
    own = Search(q);
    unlimited = &own;
  }
  const std::vector<Evaluation>& u = unlimited->top;
  if (u.empty() || !u[0].feasible || !(u[0].cost < chosen.cost * (1 - options.hysteresis)))
    return std::nullopt;
  return best;
}

// RecommendOptions::decide_again_s under a deadline (the cost goal): a plan of two on-demand
// configurations, one after the other, each counted with the noise of its part of the run
// (Predictor::steps_between). A candidate of SearchResult::deadline_bridges_on_demand runs now,
// while the noise is small and a smaller batch on fewer GPUs makes progress for less; a fallback
// that meets the deadline on its own (in SearchResult::top) takes over from where that stay leaves
// the job, at the larger batch the grown noise makes efficient, and finishes in time. The stay can
// end at any share of the way (on a grid of kShares) from which the fallback, switched to then,
// still meets the deadline and budget, margins included; the plan is priced at the cheapest such
// stay of at least one window. On demand only: no revocation takes the stay's progress back. The
// job decides again every window with what it measured, so an estimate that moves moves the plan.
// The hysteresis is DeadlineBridge's. nullopt when there is none.
std::optional<Bridge> ProgressBridge(const SearchProblem& p, const RecommendOptions& options,
                                     const SearchResult& sr, const Evaluation& chosen) {
  const ObjectiveOptions& o = p.objective;
  if (o.goal != Goal::kCost || !(o.deadline_h > 0) || !(options.decide_again_s > 0) ||
      !chosen.feasible || !(chosen.hours > 0) || !p.predictor.steps_between)
    return std::nullopt;
  constexpr int kShares = 32;
  const double window_h = options.decide_again_s / 3600;
  auto share = [](int i) { return static_cast<double>(i) / kShares; };
  std::optional<Bridge> best;
  for (const Evaluation& f : sr.top) {
    if (!f.feasible || f.config.purchase != Purchase::kOnDemand || !(f.hours > 0) || !(f.steps > 0))
      continue;
    // Hours per step, overheads included (the switch aside), and per hour, as Evaluate has them.
    const double f_step_h = std::max(0.0, f.hours - f.switch_s / 3600) / f.steps;
    const double f_rate = f.cost / f.hours;
    const double fb = static_cast<double>(f.config.global_batch());
    std::vector<double> f_rest(kShares, 0);  // hours from share i to the target
    for (int i = 1; i < kShares; ++i)
      f_rest[i] = p.predictor.steps_between(fb, share(i), 1).value * f_step_h;
    for (const Evaluation& c : sr.deadline_bridges_on_demand) {
      if (!Runnable(p, c) || !(c.hours > 0) || !(c.steps > 0) || !(c.cost < chosen.cost) ||
          c.config.SameHardware(f.config))
        continue;
      const double c_step_h = std::max(0.0, c.hours - c.switch_s / 3600) / c.steps;
      const double c_rate = c.cost / c.hours;
      const double back_h = p.cost.switch_s / 3600;
      const double cb = static_cast<double>(c.config.global_batch());
      std::optional<Bridge> plan;
      for (int i = 1; i < kShares; ++i) {
        const double stay_h =
            c.switch_s / 3600 + p.predictor.steps_between(cb, 0, share(i)).value * c_step_h;
        const double hours = stay_h + back_h + f_rest[i];
        const double cost = c_rate * stay_h + f_rate * (back_h + f_rest[i]);
        if (!std::isfinite(hours) || o.Miss(hours, cost, f.log_sigma) > 1) break;
        if (stay_h >= window_h && (!plan || cost < plan->cost))
          plan = Bridge{c, f, stay_h, cost, share(i)};
      }
      if (plan && BridgeWorthIt(p, options, c, chosen, plan->cost) &&
          (!best || plan->cost < best->cost))
        best = plan;
    }
  }
  return best;
}

// Under a deadline, the cheaper of the two bridges (DeadlineBridge, ProgressBridge) replaces
// `chosen` when there is one; the reason says why.
void TakeBridge(const SearchProblem& p, const RecommendOptions& options, const SearchResult& sr,
                const SearchResult* unlimited, Recommendation* r, Evaluation* chosen,
                std::ostringstream* why) {
  std::optional<Bridge> b = DeadlineBridge(p, options, sr, *chosen, unlimited);
  if (auto on_demand = ProgressBridge(p, options, sr, *chosen);
      on_demand && (!b || on_demand->cost < b->cost))
    b = on_demand;
  if (!b) return;
  const CostUnit unit = r->cost_unit;
  const bool keep = r->has_current && b->run.config == r->current.config;
  r->action = keep ? Recommendation::Action::kKeep : Recommendation::Action::kSwitch;
  why->str("");
  *why << "deadline: " << (keep ? "keeping " : "moving to ") << b->run.config.ToString()
       << ", which misses the deadline on its own but costs less for the same progress, while "
          "the fallback still covers the deadline (up to "
       << std::fixed << std::setprecision(2) << b->stay_h << " h, deciding again every "
       << std::setprecision(0) << options.decide_again_s << " s); after it "
       << b->fallback.config.ToString();
  if (b->share > 0)
    *why << " finishes in time from " << std::setprecision(0) << 100 * b->share
         << "% of the way, at the batch the noise will have grown to (expected ";
  else
    *why << " still meets the deadline even if that time makes no progress (expected ";
  *why << Value(Goal::kCost, b->cost, unit) << " against " << Value(Goal::kCost, chosen->cost, unit)
       << " for " << chosen->config.ToString() << ")";
  *chosen = b->run;
  r->bridge_cost = b->cost;
}

}  // namespace

Recommendation Decide(const SearchProblem& problem, const RecommendOptions& options,
                      const std::function<bool(const Config&)>& measured,
                      const SearchResult* unlimited) {
  const Goal goal = problem.objective.goal;
  SearchProblem p = problem;
  p.keep_top = std::max(problem.keep_top, options.explore_candidates);
  SearchResult sr = Search(p);
  if (sr.top.empty() || !std::isfinite(sr.top[0].hours))
    throw InputError("search: no candidate configuration could be evaluated");
  Recommendation r;
  r.goal = goal;
  r.evaluated = sr.evaluated;
  r.catalog_source = problem.catalog->source;
  r.cost_unit = problem.catalog->cost_unit;
  const CostUnit unit = r.cost_unit;
  r.best = sr.top[0];
  Evaluation chosen = r.best;
  std::ostringstream why;
  if (problem.current) {
    r.has_current = true;
    r.current = Evaluate(problem, *problem.current);
  }
  const double best_v = r.best.Objective(goal);
  auto constraint_note = [&]() {
    std::string s;
    if (sr.better_but_excluded) {
      if (sr.excluded_by_deadline)
        s += "; the deadline excluded " + std::to_string(sr.excluded_by_deadline) + " candidates";
      if (sr.excluded_by_budget)
        s += "; the budget excluded " + std::to_string(sr.excluded_by_budget) + " candidates";
    }
    return s;
  };
  if (!r.best.feasible) {
    why << "no candidate meets the " << (problem.objective.deadline_h > 0 ? "deadline" : "")
        << (problem.objective.deadline_h > 0 && problem.objective.budget_usd > 0 ? " and " : "")
        << (problem.objective.budget_usd > 0 ? "budget" : "");
    // Among the candidates expected to miss about as little as the least-late one, the best by
    // the objective: estimates that all miss differ by less than their noise, and between those
    // the objective still counts (spot or on demand, say). About as late: an expected excess
    // within the hysteresis of the least-late one's, or an expected finish (and spend) within the
    // hysteresis of its. Near the deadline or budget every excess is small, and a tolerance
    // relative to the excess alone is finer than the estimates.
    const ObjectiveOptions& ob = problem.objective;
    const double h = 1 + options.hysteresis;
    const double near_x = Excess(ob, r.best) * h, near_h = r.best.hours * h,
                 near_usd = r.best.cost * h;
    auto about_as_late = [&](const Evaluation& e) {
      return Excess(ob, e) <= near_x || ((!(ob.deadline_h > 0) || e.hours <= near_h) &&
                                         (!(ob.budget_usd > 0) || e.cost <= near_usd));
    };
    for (const Evaluation& e : sr.top)
      if (!e.feasible && about_as_late(e) && e.Objective(goal) < r.best.Objective(goal)) r.best = e;
    chosen = r.best;
    const double best_x = Excess(ob, r.best);
    const double cur_x = r.has_current ? Excess(ob, r.current) : kInfinity;
    const bool cur_near = r.has_current && std::isfinite(cur_x) &&
                          cur_x - best_x <= options.hysteresis * cur_x &&
                          r.current.Objective(goal) <= r.best.Objective(goal) * h;
    if (r.has_current && (r.best.config == r.current.config || cur_near)) {
      // A switch that hardly lowers the expected excess (the switch itself included) is not made:
      // estimates that all miss are noisy, and a switch every decision would only add switches.
      r.action = Recommendation::Action::kKeep;
      chosen = r.current;
      why << " (margin included): keeping the current configuration, expected to miss them least"
          << (r.best.config == r.current.config ? "" : " within the hysteresis");
    } else {
      r.action = Recommendation::Action::kSwitch;
      why << " (margin included): proposing the one expected to miss them least";
    }
  } else if (!r.has_current) {
    r.action = Recommendation::Action::kSwitch;
    why << GoalName(goal) << ": best predicted " << Value(goal, best_v, unit) << constraint_note();
  } else if (r.best.config == r.current.config) {
    r.action = Recommendation::Action::kKeep;
    chosen = r.current;
    why << GoalName(goal) << ": the current configuration is the best predicted ("
        << Value(goal, best_v, unit) << ")" << constraint_note();
  } else if (const auto fallback =
                 r.current.feasible ? std::nullopt : BudgetFallback(p, options, sr, r.current)) {
    r.action = Recommendation::Action::kKeep;
    chosen = r.current;
    why << "budget: the current configuration's own estimate overruns it, but after " << std::fixed
        << std::setprecision(0) << options.decide_again_s << " s more, until the next decision, "
        << fallback->config.ToString() << " still meets it ("
        << Value(Goal::kCost, fallback->cost, unit) << " from now); kept";
  } else if (!r.current.feasible) {
    r.action = Recommendation::Action::kSwitch;
    why << "constraint: the current configuration misses the "
        << (problem.objective.DeadlineMiss(r.current.hours, r.current.log_sigma) > 1 ? "deadline"
                                                                                     : "budget")
        << "; the best feasible one costs " << Value(goal, best_v, unit);
  } else {
    const double cur_v = r.current.Objective(goal);
    const double gain = cur_v - best_v;
    if (gain <= options.hysteresis * cur_v) {
      r.action = Recommendation::Action::kKeep;
      chosen = r.current;
      why << "hysteresis: the best alternative saves " << Value(goal, std::max(0.0, gain), unit)
          << " (" << std::fixed << std::setprecision(1) << 100 * std::max(0.0, gain) / cur_v
          << "%, switching cost included), below the " << 100 * options.hysteresis << "% threshold";
    } else {
      r.action = Recommendation::Action::kSwitch;
      why << GoalName(goal) << ": switching saves " << Value(goal, gain, unit) << " (" << std::fixed
          << std::setprecision(1) << 100 * gain / cur_v << "%) including the switch ("
          << r.best.switch_s << " s)" << constraint_note();
    }
  }
  if (sr.has_plan && chosen.config == sr.top[0].config)
    why << "; toward " << sr.plan.config.ToString() << " (predicted "
        << Value(goal, sr.plan.Objective(goal), unit)
        << "): its batch is beyond what the job has observed, so the batch grows there as the job "
           "measures it, and no batch within that bound meets the "
        << (problem.objective.deadline_h > 0 ? "deadline" : "budget") << " on its own";
  detail::Explore(p, options, sr, best_v, measured, &r, &chosen, &why);
  // After exploration: a measurement is judged against the feasible choice, and wins.
  if (r.best.feasible && r.action != Recommendation::Action::kMeasure)
    TakeBridge(p, options, sr, unlimited, &r, &chosen, &why);
  r.proposed = chosen;
  r.reason = why.str();
  if (r.has_current)
    r.in_process = r.action != Recommendation::Action::kMeasure &&
                           chosen.config.SameHardware(r.current.config) &&
                           !(chosen.config == r.current.config && !Runnable(problem, r.current))
                       ? chosen
                       : BestInProcess(problem, options, sr.same_hardware, r.current);
  for (const Evaluation& e : sr.top) {
    if (e.config == r.proposed.config) continue;
    if (r.alternatives.size() >= 5) break;
    r.alternatives.push_back(e);
  }
  return r;
}

namespace {

// The mixed-cluster search around the single-type result, the clusters' steps from the one
// throughput model over types (estimator/mixed_cluster.h), the spot capacity known as the nodes
// available of each type. `p` and `single`: the problem without its spot capacity limits, and its
// search (the seeds: what the job would run with all the capacity it wants; the clusters keep what
// is available of the preferred type).
MixedSearchResult MixedAround(const SearchProblem& p, const SearchResult& single,
                              const std::map<std::string, int>& spot_nodes_available,
                              const ProfilePredictor& predictor, const RecommendOptions& options,
                              const Evaluation& best_available,
                              const std::optional<MixedConfig>& current) {
  auto hardware = std::make_shared<std::map<std::string, estimator::Hardware>>();
  for (const InstanceType& t : p.catalog->types)
    (*hardware)[t.name] = HardwareOf(*p.catalog, t.name);
  auto mixed = std::make_shared<estimator::MixedClusterPredictor>(predictor.model(), *hardware);
  const ProfilePredictor* one = &predictor;
  const Catalog* catalog = p.catalog;
  MixedStepFn step = [mixed, hardware, one, catalog](const MixedConfig& c) {
    // One hardware (spot and on-demand nodes of one type): the single-type prediction of the
    // whole cluster, a measurement when the job has run it.
    if (c.OneHardware() && c.replicas() > 0) {
      Config whole;
      whole.type = c.parts[0].type;
      whole.nodes = c.nodes();
      whole.gpus_per_node = c.parts[0].gpus_per_node;
      whole.local_bsz = static_cast<int>(std::max<long long>(1, c.global_batch / c.replicas()));
      MixedStep s;
      s.step = one->StepTime(catalog->types[catalog->Find(whole.type)], whole);
      s.local_bsz.assign(c.parts.size(), whole.local_bsz);
      s.global_batch = whole.global_batch();
      return s;
    }
    std::vector<estimator::ClusterPart> parts;
    for (const MixedPart& m : c.parts) parts.push_back({m.type, m.nodes, m.gpus_per_node});
    MixedStep s;
    try {
      const estimator::MixedStepPrediction pr = mixed->Predict(parts, c.global_batch);
      s.step = {pr.step_time, pr.log_sigma};
      s.local_bsz = pr.local_bsz;
      s.global_batch = pr.global_batch;
    } catch (const InputError&) {
      s.step = {0.0, 0.0};  // cannot be predicted: not a candidate
    }
    return s;
  };
  MixedSearchOptions mo;
  mo.max_types = options.mixed_max_types;
  mo.spot_nodes_available = spot_nodes_available;
  mo.baseline = best_available;  // the best single type the capacity allows
  mo.current = current;
  mo.hysteresis = options.hysteresis;
  return SearchMixed(p, single, step, mo);
}

// The search's steps predictor: `eff`'s steps from the current to the target progress, with the
// options' floor on their log sigma.
std::function<Estimate(double)> StepsPredictor(
    std::shared_ptr<const estimator::EfficiencyModel> eff, const RecommendOptions& options) {
  const double from = options.current_progress, to = options.target_progress;
  const double floor = options.steps_sigma_floor;
  return [eff, from, to, floor](double batch) {
    estimator::StepsPrediction s = eff->StepsToProgress(batch, from, to);
    return Estimate{s.steps, std::sqrt(s.log_sigma * s.log_sigma + floor * floor)};
  };
}

// A growing forecast values a batch as if it ran to the end, which favours one larger than the
// noise now makes efficient. The job changes its batch in process, for free, as the noise grows,
// so it runs now the batch that is best for the noise now (the flat forecast) on the hardware
// chosen, never above the batch the search chose, and only beyond the hysteresis: in a switch's
// proposal and in the batch taken up in process. Not when the proposal misses the deadline: the
// job is behind; it observes its noise at the batch it runs, and the largest batch observed bounds
// how far the batch may grow at the next decision (SpaceOptions::max_batch_growth), so a smaller
// batch now slows the growth the job needs to catch up.
void TakeTheBatchForTheNoiseNow(const SearchProblem& p, const estimator::EfficiencyModel& eff,
                                const RecommendOptions& options, Recommendation* r) {
  if (r->action == Recommendation::Action::kMeasure && !r->in_process) return;
  if (p.objective.DeadlineMiss(r->proposed.hours, r->proposed.log_sigma) > 1) return;
  SearchProblem now = p;
  now.predictor.steps = StepsPredictor(
      std::make_shared<estimator::EfficiencyModel>(eff.WithoutProgressGrowth()), options);
  const Goal goal = p.objective.goal;
  auto batch_now = [&](Evaluation* e) {
    Config best = e->config;
    double best_v = Evaluate(now, best).Objective(goal);
    auto offer = [&](const Config& base) {
      Config c = base;
      c.purchase = e->config.purchase;
      if (!c.SameHardware(e->config) || c.global_batch() >= e->config.global_batch()) return;
      const double v = Evaluate(now, c).Objective(goal);
      if (v < best_v * (1 - options.hysteresis)) best = c, best_v = v;
    };
    ForEachCandidateOfType(now, e->config.type, offer);
    e->config = best;
  };
  if (r->action == Recommendation::Action::kSwitch) {
    const Config searched = r->proposed.config;
    batch_now(&r->proposed);
    if (!(r->proposed.config == searched)) {
      if (r->best.config == searched) r->best.config = r->proposed.config;  // best = proposed
      auto& alt = r->alternatives;
      alt.erase(std::remove_if(alt.begin(), alt.end(),
                               [&](const Evaluation& e) { return e.config == r->proposed.config; }),
                alt.end());
      r->reason += "; at batch " + std::to_string(r->proposed.config.global_batch()) +
                   " for the noise now, not " + std::to_string(searched.global_batch()) +
                   " (the batch grows in process with the noise)";
      if (r->has_current && r->proposed.config == r->current.config)
        r->action = Recommendation::Action::kKeep;
    }
  }
  if (r->in_process) batch_now(&*r->in_process);
}

// See RecommendOptions::observe_batch_first.
void ObserveTheBatchFirst(const SearchProblem& p, const std::vector<core::Measurement>& profile,
                          Recommendation* r) {
  if (!r->has_current || !p.current || p.relaunch_current) return;
  if (!(p.objective.deadline_h > 0) || r->action != Recommendation::Action::kSwitch) return;
  const Config& cur = *p.current;
  if (r->proposed.config.SameHardware(cur) || !Runnable(p, r->current)) return;
  std::set<int> per_gpu;  // samples per GPU per micro-step, measured on this type
  for (const auto& m : profile)
    if (m.key.instance_type == cur.type) per_gpu.insert(m.key.local_bsz);
  if (per_gpu.size() != 1) return;
  const int measured = *per_gpu.begin();
  const long long bound = p.space.GrowthBound(cur.global_batch());
  std::optional<Evaluation> best;  // the largest batch on the current hardware within the bound
  auto offer = [&](const Config& base) {
    Config c = base;
    c.purchase = cur.purchase;
    // More samples per micro-step (accumulated micro-steps repeat the one measured).
    if (!c.SameHardware(cur) || (bound > 0 && c.global_batch() > bound) ||
        c.accum_steps != cur.accum_steps || c.local_bsz < 2 * measured)
      return;
    if (best && c.global_batch() <= best->config.global_batch()) return;
    Evaluation e = Evaluate(p, c);
    if (std::isfinite(e.hours) && Runnable(p, e)) best = std::move(e);
  };
  ForEachCandidateOfType(p, cur.type, offer);
  if (!best) return;
  r->reason = "observe: measuring the current hardware at batch " +
              std::to_string(best->config.global_batch()) +
              " first, in process: its step time was measured at one per-GPU batch, which does "
              "not tell how it grows with the batch, and the move under the deadline rests on "
              "that; then: " +
              r->reason;
  r->action = Recommendation::Action::kMeasure;
  r->proposed = *best;
  r->in_process = *best;
}
}  // namespace

Recommendation Recommend(const RecommendRequest& req) {
  const Catalog& catalog = req.catalog ? *req.catalog : DefaultCatalog();
  std::string err;
  if (!req.options.IsValid(&err)) throw InputError("recommend options: " + err);
  if (!(req.options.target_progress > req.options.current_progress))
    throw InputError("recommend: target progress (" + std::to_string(req.options.target_progress) +
                     ") must exceed the current progress (" +
                     std::to_string(req.options.current_progress) + ")");
  if (!req.noise && !req.efficiency)
    throw InputError("recommend: no gradient noise state or efficiency model given");
  if (req.profile.empty() && !req.current)
    throw InputError("recommend: empty profile and no current configuration");
  // Resolve the profile's types.
  std::vector<core::Measurement> profile = req.profile;
  for (auto& m : profile) {
    if (m.key.instance_type.empty()) {
      if (!req.current)
        throw InputError(
            "profile: a configuration has no instance_type and no current "
            "configuration was given");
      m.key.instance_type = req.current->type;
    }
    if (catalog.Find(m.key.instance_type) < 0)
      throw InputError("profile: instance type '" + m.key.instance_type +
                       "' is not in the catalog");
  }
  Config current;
  if (req.current) {
    current = *req.current;
  } else {  // the most-measured configuration, on demand
    const core::Measurement* most = &profile[0];
    for (const auto& m : profile)
      if (m.rows > most->rows) most = &m;
    const InstanceType& t = catalog.types[catalog.Find(most->key.instance_type)];
    current.type = t.name;
    current.nodes = most->key.num_nodes;
    current.gpus_per_node =
        most->max_gpus_per_node > 0
            ? most->max_gpus_per_node
            : std::min(t.gpus,
                       (most->key.num_replicas + most->key.num_nodes - 1) / most->key.num_nodes);
    current.local_bsz = most->key.local_bsz;
    current.accum_steps = most->key.accum_steps;
  }
  if (catalog.Find(current.type) < 0)
    throw InputError("current configuration: instance type '" + current.type +
                     "' is not in the catalog");
  auto predictor = std::make_shared<ProfilePredictor>(catalog, profile, req.options.measured_sigma,
                                                      req.throughput, req.gradient_bytes);
  auto eff = std::make_shared<estimator::EfficiencyModel>(
      req.efficiency ? *req.efficiency
                     : estimator::EfficiencyModel::FromNoise(
                           *req.noise, {}, static_cast<double>(current.global_batch()),
                           req.options.current_progress));
  // A deadline that the forecast proves optimistic about is defended by buying speed; a budget
  // only by slowing down, and no slower than the cheapest configuration's cost. So a budget is
  // planned on the flat forecast (the most steps the physics allows beyond the progress seen).
  if (req.options.objective.budget_usd > 0 && eff->progress_growth() > 0)
    *eff = eff->WithoutProgressGrowth();
  SearchProblem p;
  p.catalog = &catalog;
  p.predictor.step_time = [predictor](const InstanceType& t, const Config& c) {
    return predictor->StepTime(t, c);
  };
  p.predictor.steps = StepsPredictor(eff, req.options);
  p.predictor.steps_between = [eff, from = req.options.current_progress,
                               to = req.options.target_progress](double b, double x0, double x1) {
    const estimator::StepsPrediction s =
        eff->StepsToProgress(b, from + x0 * (to - from), from + x1 * (to - from));
    return Estimate{s.steps, s.log_sigma};
  };
  p.space = req.options.space;
  p.space.observed_batch = std::max(eff->max_observed_batch(), eff->base_batch());  // growth bound
  p.objective = req.options.objective;
  // A prediction that proves optimistic is corrected within a switch and a measurement.
  p.objective.uncorrectable_h = (req.options.cost.switch_s + req.options.measure_s) / 3600;
  p.objective.correction_h = req.options.cost.switch_s / 3600;  // ... by a switch
  p.cost = req.options.cost;
  p.remaining_progress = req.options.target_progress - req.options.current_progress;
  p.current = &current;
  p.relaunch_current = req.relaunch_current;
  p.candidates = req.candidates;
  std::set<core::ConfigKey> keys;
  for (const auto& m : profile) keys.insert(m.key);
  auto measured = [&keys](const Config& c) { return keys.count(c.Key()) > 0; };
  // What the job would run with all the spot capacity it wants: the seeds of the mixed-cluster
  // search, searched once when that runs, and shared with Decide (it tells a spot shortage; see
  // RecommendOptions::decide_again_s; Decide searches it itself when it needs it and has none).
  auto mixing = [&]() {
    return req.options.mixed_max_types >= 2 && !p.space.spot_nodes_available.empty() &&
           !p.space.wait_for_spot;
  };
  SearchProblem unlimited_p = p;
  unlimited_p.keep_top = std::max(p.keep_top, 32);
  unlimited_p.space.spot_nodes_available.clear();
  std::optional<SearchResult> unlimited;
  if (mixing()) unlimited = Search(unlimited_p);
  Recommendation r = Decide(p, req.options, measured, unlimited ? &*unlimited : nullptr);
  // A budget that nothing to be had now meets may still be met, or at least overrun less, by
  // waiting for the spot capacity that is short (a spot cluster pays nothing while it waits):
  // without a deadline to lose, wait.
  if (req.options.wait_for_spot_over_budget && !r.best.feasible && p.objective.budget_usd > 0 &&
      !(p.objective.deadline_h > 0) && !p.space.wait_for_spot &&
      !p.space.spot_nodes_available.empty()) {
    SearchProblem w = p;
    w.space.wait_for_spot = true;
    Recommendation waiting = Decide(w, req.options, measured);
    if (waiting.best.feasible ||
        Excess(p.objective, waiting.proposed) < Excess(p.objective, r.proposed)) {
      r = std::move(waiting);
      r.reason = "waiting for spot capacity (nothing to be had now meets the budget): " + r.reason;
      p.space.wait_for_spot = true;  // no mixed cluster either: waiting costs nothing
    }
  }
  if (eff->progress_growth() > 0) TakeTheBatchForTheNoiseNow(p, *eff, req.options, &r);
  if (req.options.observe_batch_first) ObserveTheBatchFirst(p, profile, &r);
  for (const auto& type : predictor->model().types())
    r.throughput_models[type] = predictor->model().model(type).ToJson();
  // (Not while a spot shortage is waited out: waiting costs a spot cluster nothing.)
  if (mixing() && unlimited) {
    // A mixed cluster must also beat the slower configuration the deadline leaves time for.
    Evaluation baseline = r.best;
    if (r.bridge_cost > 0) baseline.cost = std::min(baseline.cost, r.bridge_cost);
    r.mixed = MixedAround(unlimited_p, *unlimited, p.space.spot_nodes_available, *predictor,
                          req.options, baseline, req.current_mixed);
  }
  return r;
}

std::vector<core::ClusterPart> MixedPartsOf(const Recommendation& r) {
  if (!r.mixed || !r.mixed->proposed || !r.mixed->best) return {};
  return PartsOf(*r.mixed->best);
}

}  // namespace cloudtune::search
