// Recommend(), the search's entry point: the choices it makes around a single Decide(); and
// Decide() alone where a hand-made problem shows a rule more plainly.
#include "search/recommend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "estimator/efficiency.h"

namespace cloudtune::search {
namespace {

// A job measured on g4dn.12xlarge (1, 2 and 4 nodes at three local batches), plain-theory steps.
RecommendRequest MeasuredOnT4() {
  RecommendRequest req;
  for (int nodes : {1, 2, 4})
    for (int bsz : {32, 64, 128}) {
      core::Measurement m;
      m.key = {nodes, nodes * 4, bsz, 0, "g4dn.12xlarge"};
      m.sync_time = nodes > 1 ? 0.03 + 0.002 * nodes * 4 : 0.01;
      m.step_time = 0.02 + 4e-3 * bsz + m.sync_time;
      m.rows = 20;
      req.profile.push_back(m);
    }
  req.noise = core::NoiseState{1.0, 2000.0 / 64, 64};
  Config cur;
  cur.type = "g4dn.12xlarge";
  cur.nodes = 1;
  cur.gpus_per_node = 4;
  cur.local_bsz = 64;
  cur.purchase = Purchase::kOnDemand;  // where it was launched
  req.current = cur;
  req.options.target_progress = 2e5;
  req.options.space.types = {"g4dn.12xlarge"};
  req.options.space.allow_anchor = false;
  req.options.mixed_max_types = 0;
  return req;
}

// A first launch before anything is measured: spot for the cost goal without a deadline when an
// hour of work there, revocations priced in, costs less than on demand; on demand for the time
// goal, under a deadline, for a type with no spot offer, or when spot (with its revocations) is the
// dearer.
TEST(Recommend, AFirstLaunchBuysSpotOnlyForCostWithoutADeadline) {
  const Catalog& catalog = DefaultCatalog();
  const InstanceType& t4 = catalog.types[catalog.Find("g4dn.12xlarge")];
  ASSERT_TRUE(t4.has_spot());
  ObjectiveOptions cost;
  const LaunchAdvice spot = AdviseLaunch(t4, 2, cost, CostOptions{});
  EXPECT_EQ(spot.purchase, Purchase::kSpot) << spot.reason;
  EXPECT_EQ(spot.reason.rfind("spot: $", 0), 0u) << spot.reason;
  ObjectiveOptions budget = cost;
  budget.budget_usd = 100;
  EXPECT_EQ(AdviseLaunch(t4, 2, budget, CostOptions{}).purchase, Purchase::kSpot);
  ObjectiveOptions deadline = cost;
  deadline.deadline_h = 10;
  const LaunchAdvice d = AdviseLaunch(t4, 2, deadline, CostOptions{});
  EXPECT_EQ(d.purchase, Purchase::kOnDemand);
  EXPECT_NE(d.reason.find("deadline"), std::string::npos) << d.reason;
  ObjectiveOptions time;
  time.goal = Goal::kTime;
  EXPECT_EQ(AdviseLaunch(t4, 2, time, CostOptions{}).purchase, Purchase::kOnDemand);
  InstanceType no_spot = t4;
  no_spot.spot_per_hour = -1;
  EXPECT_EQ(AdviseLaunch(no_spot, 2, cost, CostOptions{}).purchase, Purchase::kOnDemand);
  // Revoked often enough that the restarts and lost work outweigh the discount.
  InstanceType stormy = t4;
  stormy.revocation_per_hour = 20;
  const LaunchAdvice s = AdviseLaunch(stormy, 2, cost, CostOptions{});
  EXPECT_EQ(s.purchase, Purchase::kOnDemand) << s.reason;
  EXPECT_NE(s.reason.find("on demand: $"), std::string::npos) << s.reason;
}

// Under a budget without a deadline, when no spot node can be had now and on demand would overrun
// the budget, the job waits for the spot capacity (a spot cluster pays nothing while it waits);
// with the waiting turned off it takes what can be had now.
TEST(Recommend, ABudgetOnlySpotMeetsWaitsForTheCapacityUnlessTurnedOff) {
  RecommendRequest req = MeasuredOnT4();
  const Recommendation free = Recommend(req);
  ASSERT_EQ(free.best.config.purchase, Purchase::kSpot);
  req.options.objective.budget_usd = 1.5 * free.best.cost;  // on demand costs ~3x spot
  req.options.space.spot_nodes_available = {{"g4dn.12xlarge", 0}};
  const Recommendation waits = Recommend(req);
  EXPECT_EQ(waits.reason.rfind("waiting for spot capacity", 0), 0u) << waits.reason;
  EXPECT_EQ(waits.proposed.config.purchase, Purchase::kSpot);
  EXPECT_TRUE(waits.best.feasible);
  req.options.wait_for_spot_over_budget = false;
  const Recommendation now = Recommend(req);
  EXPECT_EQ(now.reason.find("waiting for spot capacity"), std::string::npos) << now.reason;
  EXPECT_EQ(now.proposed.config.purchase, Purchase::kOnDemand);
  EXPECT_FALSE(now.best.feasible);
  // A deadline rules waiting out.
  req.options.wait_for_spot_over_budget = true;
  req.options.objective.deadline_h = 1e3;
  EXPECT_EQ(Recommend(req).reason.find("waiting for spot capacity"), std::string::npos);
}

// What a running job can take up in process: the proposal when it keeps the hardware; when it
// needs other hardware (here spot instead of the on-demand machine the job runs on), the best
// batch on the hardware the job runs, past the hysteresis; and always a batch that fits the memory
// limits when the current one does not.
TEST(Recommend, InProcessIsTheBestBatchOnTheHardwareTheJobRuns) {
  RecommendRequest req = MeasuredOnT4();
  req.current->local_bsz = 32;  // measured, and far below the noise scale (~2,000 samples)
  const Config& cur = *req.current;
  const Recommendation r = Recommend(req);
  ASSERT_EQ(r.proposed.config.purchase, Purchase::kSpot);  // a relaunch
  ASSERT_TRUE(r.in_process);
  EXPECT_TRUE(r.in_process->config.SameHardware(cur));
  EXPECT_GT(r.in_process->config.global_batch(), cur.global_batch());
  EXPECT_LT(r.in_process->cost, r.current.cost * (1 - req.options.hysteresis));
  // It is the cheapest batch on that hardware: on demand only, the proposal is the same.
  RecommendRequest od = req;
  od.options.space.allow_spot = false;
  od.options.exploration_budget_share = 0;
  const Recommendation o = Recommend(od);
  ASSERT_TRUE(o.proposed.config.SameHardware(cur)) << o.proposed.config.ToString();
  ASSERT_TRUE(o.in_process);
  EXPECT_EQ(o.in_process->config, o.proposed.config);
  EXPECT_EQ(r.in_process->config, o.proposed.config);
  // The one rule: only a job on that hardware takes it up.
  EXPECT_EQ(InProcessBatch(r, cur), r.in_process->config);
  EXPECT_FALSE(InProcessBatch(r, r.proposed.config));
  // Within the hysteresis the job keeps its batch...
  req.options.hysteresis = 0.9;
  const Recommendation h = Recommend(req);
  ASSERT_TRUE(h.in_process);
  EXPECT_EQ(h.in_process->config, cur);
  // ... unless it is over the memory limit.
  req.options.space.max_local_bsz = 16;
  const Recommendation m = Recommend(req);
  ASSERT_TRUE(m.in_process);
  EXPECT_TRUE(m.in_process->config.SameHardware(cur));
  EXPECT_LE(m.in_process->config.local_bsz, 16);
}

// Fastest within a budget: a current configuration whose own estimate overruns what is left of the
// budget by less than the hysteresis is kept while the job can still run it until its next decision
// and then finish within the budget on a cheaper configuration; beyond the hysteresis, or when that
// last decision's worth of spending would leave the cheaper one over the budget, it is left now.
TEST(Recommend, TheCurrentConfigurationIsKeptAtTheBudgetsEdgeWhileACheaperOneStillFits) {
  RecommendRequest req = MeasuredOnT4();
  req.current->nodes = 4;  // measured; its all-reduce makes it dearer than one node
  req.current->purchase = Purchase::kSpot;
  req.options.objective.goal = Goal::kTime;
  req.options.space.allow_on_demand = false;
  req.options.exploration_budget_share = 0;
  const double cost = Recommend(req).current.cost;  // its own estimate to the target
  auto decide = [&](double over, double decide_again_s) {
    RecommendRequest r = req;
    r.options.objective.budget_usd = cost / over;
    r.options.decide_again_s = decide_again_s;
    return Recommend(r);
  };
  const Recommendation once = decide(1.01, 0);  // a one-off recommendation: no next decision
  ASSERT_FALSE(once.current.feasible);
  ASSERT_TRUE(once.best.feasible);
  EXPECT_LT(once.best.cost, 0.9 * cost) << once.best.config.ToString();
  EXPECT_EQ(once.action, Recommendation::Action::kSwitch) << once.reason;
  EXPECT_EQ(once.reason.rfind("constraint: the current configuration misses the budget", 0), 0u);
  const Recommendation kept = decide(1.01, 1800);
  EXPECT_EQ(kept.action, Recommendation::Action::kKeep) << kept.reason;
  EXPECT_EQ(kept.proposed.config, *req.current);
  EXPECT_EQ(kept.reason.rfind("budget: the current configuration's own estimate overruns it", 0),
            0u)
      << kept.reason;
  EXPECT_NE(kept.reason.find("after 1800 s more"), std::string::npos) << kept.reason;
  // Over by more than the hysteresis (3 %): left now.
  EXPECT_EQ(decide(1.05, 1800).action, Recommendation::Action::kSwitch);
  // The next decision so far off that running on until then would spend the budget: left now.
  const double budget_h = cost / 1.01 / once.current.price_per_hour;
  EXPECT_EQ(decide(1.01, budget_h * 3600).action, Recommendation::Action::kSwitch);
  // Options: the interval is validated.
  RecommendOptions bad;
  bad.decide_again_s = -1;
  std::string error;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("decide_again_s"), std::string::npos) << error;
}

// A noise ratio that has grown like P^0.6 over the job's first 10,000 B0-steps (B0 = 64) to 2 (a
// noise scale of 128 samples, so small batches are the efficient ones now), seen at two batches:
// its efficiency model forecasts the growth on.
estimator::EfficiencyModel GrowingNoise() {
  std::vector<core::NoiseObservation> obs;
  for (double b : {64.0, 128.0})
    for (double p = 100; p <= 1e4; p *= 1.1) {
      core::NoiseObservation o;
      o.batch = b;
      o.progress = p;
      o.grad_sqr = 1;
      o.grad_var = 2 * std::pow(p / 1e4, 0.6);
      obs.push_back(o);
    }
  estimator::EfficiencyFitOptions opt;
  opt.base_batch = 64;
  return estimator::FitEfficiency(obs, opt);
}

// The growth the job's observations show shortens its forecasts of large batches, and the search
// uses it to choose the hardware, except under a budget: a budget is planned on the flat forecast
// (the most steps the physics allows), since a job can defend a deadline by buying speed but a
// budget only down to the cheapest configuration's cost.
TEST(Recommend, ABudgetIsPlannedOnTheFlatForecastAndTheRestOnTheGrowth) {
  const estimator::EfficiencyModel growing = GrowingNoise();
  ASSERT_GT(growing.progress_growth(), 0.4);
  RecommendRequest req = MeasuredOnT4();
  req.noise.reset();
  req.options.current_progress = 1e4;
  req.options.exploration_budget_share = 0;
  RecommendRequest flat = req;
  req.efficiency = growing;
  flat.efficiency = growing.WithoutProgressGrowth();
  // No budget: the current configuration (batch 256 = 4 B0) is forecast faster with the growth.
  const Recommendation g = Recommend(req), f = Recommend(flat);
  EXPECT_LT(g.current.hours, 0.95 * f.current.hours);
  // The batch taken up now is the one for the noise now (the batch changes in process, for free,
  // as the noise grows): the flat forecast's, not the larger one that would be best if run to the
  // end.
  ASSERT_TRUE(g.in_process && f.in_process);
  EXPECT_EQ(g.in_process->config, f.in_process->config) << g.in_process->config.ToString();
  EXPECT_EQ(g.proposed.config, f.proposed.config) << g.proposed.config.ToString();
  // The recommendation says so and stays one: the best is the proposal, not among the alternatives.
  EXPECT_NE(g.reason.find("at batch 64 for the noise now, not 128"), std::string::npos) << g.reason;
  EXPECT_EQ(g.best.config, g.proposed.config);
  for (const Evaluation& e : g.alternatives) EXPECT_FALSE(e.config == g.proposed.config);
  // With a budget, the same plan as the flat forecast's, estimate for estimate.
  for (Goal goal : {Goal::kTime, Goal::kCost}) {
    req.options.objective.goal = flat.options.objective.goal = goal;
    req.options.objective.budget_usd = flat.options.objective.budget_usd = 1.2 * f.current.cost;
    const Recommendation gb = Recommend(req), fb = Recommend(flat);
    EXPECT_EQ(gb.proposed.config, fb.proposed.config);
    EXPECT_DOUBLE_EQ(gb.current.cost, fb.current.cost);
    EXPECT_DOUBLE_EQ(gb.proposed.hours, fb.proposed.hours);
  }
}

// Behind its deadline, the job keeps the batch the search chose: it observes its noise at the
// batch it runs, and the largest batch observed bounds how far its batch may grow next, so the
// smaller batch for the noise now would slow the growth it needs to catch up.
TEST(Recommend, BehindItsDeadlineTheJobKeepsTheBatchTheSearchChose) {
  RecommendRequest req = MeasuredOnT4();
  req.noise.reset();
  req.efficiency = GrowingNoise();
  req.options.current_progress = 1e4;
  req.options.exploration_budget_share = 0;
  req.options.space.max_nodes = 1;  // the job's own node: only its batch can change
  // A deadline the job meets: the batch for the noise now is taken up, smaller than the searched.
  const Recommendation free = Recommend(req);
  req.options.objective.deadline_h = 2 * free.best.hours;
  const Recommendation met = Recommend(req);
  ASSERT_TRUE(met.best.feasible) << met.reason;
  EXPECT_NE(met.reason.find("for the noise now"), std::string::npos) << met.reason;
  // A deadline nothing meets: the proposal is the batch expected to be least late.
  req.options.objective.deadline_h = 0.3 * free.best.hours;
  const Recommendation behind = Recommend(req);
  ASSERT_FALSE(behind.best.feasible) << behind.reason;
  EXPECT_EQ(behind.reason.find("for the noise now"), std::string::npos) << behind.reason;
  EXPECT_EQ(behind.proposed.config, behind.best.config) << behind.proposed.config.ToString();
  EXPECT_GT(behind.proposed.config.global_batch(), met.proposed.config.global_batch())
      << behind.proposed.config.ToString() << " vs " << met.proposed.config.ToString();
}

// MeasuredOnT4 with one spot node to be had and no exploration: without a deadline the spot node
// is the cheapest (checked), and its hours are returned.
double OneSpotNodeOnT4(RecommendRequest* req) {
  *req = MeasuredOnT4();
  req->options.exploration_budget_share = 0;
  req->options.space.spot_nodes_available = {{"g4dn.12xlarge", 1}};
  const Recommendation free = Recommend(*req);
  EXPECT_EQ(free.best.config.purchase, Purchase::kSpot) << free.best.config.ToString();
  EXPECT_EQ(free.best.config.nodes, 1);
  return free.best.hours;
}

// Cheapest within a deadline, with one spot node to be had (a shortage: more would meet the
// deadline for less): the spot node alone misses the deadline, so a one-off recommendation buys on
// demand. A job that decides again runs the spot node until then, while the cheapest on-demand
// configuration that meets the deadline can still finish in time after that window even if it
// made no progress; when the window is too long for that, it buys on demand now. Without spot, the
// one node on demand runs while the faster cluster can still finish from where it leaves off.
TEST(Recommend, UnderADeadlineACheaperSlowConfigurationRunsWhileAFallbackStillMeetsIt) {
  RecommendRequest req;
  const double spot_h = OneSpotNodeOnT4(&req);
  if (HasFailure()) return;
  auto decide = [&](double deadline_h, double decide_again_s) {
    RecommendRequest r = req;
    r.options.objective.deadline_h = deadline_h;
    r.options.decide_again_s = decide_again_s;
    return Recommend(r);
  };
  const double deadline_h = 0.6 * spot_h;  // the spot node alone misses it
  const Recommendation once = decide(deadline_h, 0);
  ASSERT_TRUE(once.best.feasible) << once.reason;
  EXPECT_EQ(once.proposed.config.purchase, Purchase::kOnDemand) << once.reason;
  EXPECT_GE(once.proposed.config.nodes, 2) << once.reason;
  const Recommendation bridged = decide(deadline_h, 1800);
  EXPECT_EQ(bridged.proposed.config.purchase, Purchase::kSpot) << bridged.reason;
  EXPECT_EQ(bridged.proposed.config.nodes, 1) << bridged.reason;
  EXPECT_FALSE(bridged.proposed.feasible);
  EXPECT_LT(bridged.proposed.cost, once.proposed.cost);
  EXPECT_EQ(bridged.reason.rfind("deadline: moving to", 0), 0u) << bridged.reason;
  EXPECT_NE(bridged.reason.find("still meets the deadline even if that time makes no progress"),
            std::string::npos)
      << bridged.reason;
  // Running on until a decision that far off would leave the fallback no time: on demand now.
  const Recommendation late = decide(deadline_h, 0.9 * deadline_h * 3600);
  EXPECT_EQ(late.proposed.config.purchase, Purchase::kOnDemand) << late.reason;
  EXPECT_EQ(late.reason.find("deadline: moving to"), std::string::npos) << late.reason;
  // Without a deadline there is nothing to bridge: the spot node meets the cost goal on its own.
  EXPECT_EQ(decide(0, 1800).reason.find("deadline:"), std::string::npos);
  // On demand only, one node is the cheapest for the same progress (no all-reduce) and misses the
  // deadline. A stay on demand makes the progress it is priced for: the job runs the one node
  // while the noise is small, and the faster cluster, at the larger batch the grown noise makes
  // efficient, finishes from where it leaves off; the plan costs less than that cluster alone.
  req.options.space.allow_spot = false;
  req.options.space.spot_nodes_available.clear();
  const Recommendation od = decide(deadline_h, 1800);
  ASSERT_TRUE(od.best.feasible) << od.reason;
  EXPECT_EQ(od.proposed.config.nodes, 1) << od.reason;
  EXPECT_EQ(od.proposed.config.purchase, Purchase::kOnDemand) << od.reason;
  EXPECT_FALSE(od.proposed.feasible);
  EXPECT_NE(od.reason.find("finishes in time from"), std::string::npos) << od.reason;
  ASSERT_GT(od.bridge_cost, 0);
  EXPECT_LT(od.bridge_cost, (1 - req.options.hysteresis) * od.best.cost) << od.reason;
  // A one-off recommendation has no later decision to move on: it buys the faster cluster.
  const Recommendation od_once = decide(deadline_h, 0);
  EXPECT_GE(od_once.proposed.config.nodes, 2) << od_once.reason;
  EXPECT_EQ(od_once.reason.find("deadline: moving to"), std::string::npos) << od_once.reason;
  // Nor does a job whose next decision comes too late for the cluster to finish after it.
  const Recommendation od_late = decide(deadline_h, 0.9 * deadline_h * 3600);
  EXPECT_GE(od_late.proposed.config.nodes, 2) << od_late.reason;
}

// The job decides again every window and rides the cheaper configuration for as long as the
// fallback still covers the deadline, so the bridge is priced over that whole stay. With decisions
// a minute apart, one window's progress on the spot node saves less than the hysteresis; the stay
// the slack allows saves far more, and the job rides the spot node. (A window longer than any
// fallback covers: the test above.)
TEST(Recommend, UnderADeadlineTheBridgeIsPricedOverTheWholeStayTheFallbackCovers) {
  RecommendRequest req;
  const double spot_h = OneSpotNodeOnT4(&req);
  if (HasFailure()) return;
  req.options.objective.deadline_h = 0.6 * spot_h;  // the spot node alone misses it
  req.options.decide_again_s = 60;
  const Recommendation r = Recommend(req);
  ASSERT_TRUE(r.best.feasible) << r.reason;
  EXPECT_EQ(r.proposed.config.purchase, Purchase::kSpot) << r.reason;
  EXPECT_EQ(r.proposed.config.nodes, 1) << r.reason;
  EXPECT_EQ(r.reason.rfind("deadline: moving to", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find("while the fallback still covers the deadline"), std::string::npos)
      << r.reason;
  // The plan's expected cost is well below the best configuration that meets the deadline alone.
  ASSERT_GT(r.bridge_cost, 0);
  EXPECT_LT(r.bridge_cost, (1 - 2 * req.options.hysteresis) * r.best.cost)
      << r.bridge_cost << " vs " << r.best.cost;
  // The hysteresis favours the stay the job is on. With one so large that no new stay pays, the job
  // does not move to the spot node (it rides its own on-demand node instead, a stay it is already
  // on); a job already on the spot node keeps it, as leaving saves too little.
  RecommendRequest sticky = req;
  sticky.options.hysteresis = 0.3;  // above the stay's saving, below what spot at will saves
  ASSERT_LT(r.best.cost - r.bridge_cost, sticky.options.hysteresis * r.best.cost);
  const Recommendation fresh = Recommend(sticky);
  EXPECT_EQ(fresh.proposed.config.purchase, Purchase::kOnDemand) << fresh.reason;
  EXPECT_EQ(fresh.reason.find("deadline: moving to"), std::string::npos) << fresh.reason;
  sticky.current = r.proposed.config;
  const Recommendation on_it = Recommend(sticky);
  EXPECT_EQ(on_it.proposed.config, r.proposed.config) << on_it.reason;
  EXPECT_EQ(on_it.action, Recommendation::Action::kKeep) << on_it.reason;
  EXPECT_EQ(on_it.reason.rfind("deadline: keeping", 0), 0u) << on_it.reason;
}

// Measured at one per-GPU batch, a move to other hardware under a deadline waits for one
// measurement of the current hardware at a larger batch, in process. With a second per-GPU batch,
// or with the option off, it moves; without a deadline it is not held back.
TEST(Recommend, UnderADeadlineTheCurrentHardwareIsObservedAtALargerBatchBeforeAMove) {
  RecommendRequest req = MeasuredOnT4();
  req.options.exploration_budget_share = 0;
  std::vector<core::Measurement> all = req.profile;
  req.profile.clear();
  for (const auto& m : all)
    if (m.key.num_nodes == 1 && m.key.local_bsz == 64) req.profile.push_back(m);  // the current
  ASSERT_EQ(req.profile.size(), 1u);
  const Recommendation free = Recommend(req);
  EXPECT_EQ(free.reason.find("observe:"), std::string::npos) << free.reason;
  req.options.objective.deadline_h = 0.4 * free.best.hours;  // one node misses it
  const Recommendation first = Recommend(req);
  EXPECT_EQ(first.action, Recommendation::Action::kMeasure) << first.reason;
  EXPECT_EQ(first.reason.rfind("observe: measuring the current hardware at batch", 0), 0u)
      << first.reason;
  EXPECT_TRUE(first.proposed.config.SameHardware(*req.current)) << first.proposed.config.ToString();
  EXPECT_GE(first.proposed.config.local_bsz, 2 * req.current->local_bsz);
  ASSERT_TRUE(first.in_process.has_value());
  EXPECT_EQ(first.in_process->config, first.proposed.config);
  auto moves = [&](const RecommendRequest& r) {
    const Recommendation rec = Recommend(r);
    EXPECT_EQ(rec.reason.find("observe:"), std::string::npos) << rec.reason;
    EXPECT_EQ(rec.action, Recommendation::Action::kSwitch) << rec.reason;
    EXPECT_FALSE(rec.proposed.config.SameHardware(*r.current)) << rec.proposed.config.ToString();
  };
  RecommendRequest off = req;
  off.options.observe_batch_first = false;
  moves(off);
  RecommendRequest two_batches = req;
  for (const auto& m : all)
    if (m.key.num_nodes == 1 && m.key.local_bsz == 128) two_batches.profile.push_back(m);
  moves(two_batches);
}

// When no candidate meets the deadline, near it every expected excess is small, and a tolerance
// relative to the least-late one's alone would be finer than any estimate: a candidate expected to
// finish within the hysteresis of it is about as late, and the cheaper of the two is proposed.
// Likewise for a budget: of those expected to spend within the hysteresis of the least over it,
// the best by the objective.
TEST(Decide, WhenNoneMeetsTheDeadlineTheCheapestOfThoseFinishingAboutAsLate) {
  const Catalog& catalog = DefaultCatalog();
  SearchProblem p;
  p.catalog = &catalog;
  p.remaining_progress = 1000;
  p.space.types = {"g4dn.12xlarge", "g4dn.xlarge"};
  p.space.max_nodes = 1;
  p.space.min_local_bsz = p.space.max_local_bsz = 32;
  p.space.max_accum_steps = 0;
  p.space.allow_spot = p.space.allow_anchor = false;
  // `slow` seconds a step on one g4dn.xlarge, 1 s on one g4dn.12xlarge with its four GPUs (far
  // slower with fewer), `v100` s on one p3.8xlarge; 1,000 steps at any batch.
  auto step_times = [&](double slow, double v100) {
    p.predictor.step_time = [slow, v100](const InstanceType& t, const Config& c) {
      if (t.name == "g4dn.xlarge") return Estimate{slow, 0.0};
      if (c.gpus_per_node < t.gpus) return Estimate{10.0, 0.0};
      return Estimate{t.name == "p3.8xlarge" ? v100 : 1.0, 0.0};
    };
  };
  step_times(1.02, 1.0);
  p.predictor.steps = [](double) { return Estimate{1000, 0.0}; };
  Config fast;
  fast.type = "g4dn.12xlarge";
  fast.gpus_per_node = 4;
  fast.local_bsz = 32;
  Config cheap = fast;
  cheap.type = "g4dn.xlarge";
  cheap.gpus_per_node = 1;
  const Evaluation f = Evaluate(p, fast), ch = Evaluate(p, cheap);
  ASSERT_LT(ch.cost, 0.5 * f.cost);
  ASSERT_LE(ch.hours, 1.03 * f.hours);
  // The fast one misses the deadline by 0.01 %, the cheap one by 2 %.
  p.objective.deadline_h = f.hours / 1.0001;
  const auto excess = [&](const Config& c) {
    const Evaluation e = Evaluate(p, c);
    return p.objective.ExpectedExcess(e.hours, e.cost, e.log_sigma);
  };
  ASSERT_GT(excess(cheap), 10 * excess(fast));
  auto measured = [](const Config&) { return true; };
  RecommendOptions o;  // hysteresis 3 %
  const Recommendation r = Decide(p, o, measured);
  ASSERT_FALSE(r.best.feasible);
  EXPECT_EQ(r.action, Recommendation::Action::kSwitch) << r.reason;
  EXPECT_TRUE(r.proposed.config == cheap) << r.proposed.config.ToString();
  EXPECT_NE(r.reason.find("expected to miss them least"), std::string::npos) << r.reason;
  // Without the hysteresis the least late is proposed, however little later the cheap one is.
  RecommendOptions strict = o;
  strict.hysteresis = 0;
  EXPECT_TRUE(Decide(p, strict, measured).proposed.config == fast);
  // And one finishing later than the hysteresis allows is not about as late.
  step_times(1.05, 1.0);
  EXPECT_TRUE(Decide(p, o, measured).proposed.config == fast);
  // A budget under the time goal: one p3.8xlarge costs 2 % more than the g4dn.xlarge for the run
  // and is many times as fast.
  p.objective = {};
  p.objective.goal = Goal::kTime;
  p.space.types = {"g4dn.xlarge", "p3.8xlarge"};
  Config v100 = fast;
  v100.type = "p3.8xlarge";
  auto price = [&](const char* type) {
    return HourlyPrice(catalog.types[catalog.Find(type)], 1, Purchase::kOnDemand);
  };
  step_times(1.02, 1.02 * 1.02 * price("g4dn.xlarge") / price("p3.8xlarge"));
  const Evaluation v = Evaluate(p, v100), t = Evaluate(p, cheap);
  ASSERT_LE(v.cost, 1.03 * t.cost);
  ASSERT_LT(v.hours, 0.1 * t.hours);
  p.objective.budget_usd = t.cost / 1.0001;
  ASSERT_GT(excess(v100), 10 * excess(cheap));
  const Recommendation b = Decide(p, o, measured);
  ASSERT_FALSE(b.best.feasible);
  EXPECT_TRUE(b.proposed.config == v100) << b.proposed.config.ToString() << ": " << b.reason;
  EXPECT_TRUE(Decide(p, strict, measured).proposed.config == cheap);
}

}  // namespace
}  // namespace cloudtune::search
