#include "search/search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <utility>

#include "search/recommend.h"

namespace cloudtune::search {
namespace {

Catalog SmallCatalog() {
  std::istringstream g(
      "gpu_model,fp16_tflops,memory_bandwidth_gbs,memory_gib\nT4,65,300,16\nV100,125,900,16\n");
  Catalog c;
  c.gpus = ParseGpuSpecs(g, "g.csv");
  std::istringstream in(
      "cloud,region,instance_type,gpu_model,gpus,ondemand_usd_per_hour,spot_usd_per_hour,"
      "revocation_per_hour,network_gbps\n"
      "aws,r,t4x4,T4,4,3.9,1.2,0.01,50\n"
      "aws,r,t4x1,T4,1,0.5,0.2,0.05,5\n"
      "aws,r,v100x4,V100,4,12.2,2.0,0.03,10\n");
  c.types = ParseInstances(in, "c.csv", c.gpus);
  c.source = "test";
  return c;
}

// Synthetic workload: compute ∝ local batch / GPU speed, all-reduce grows with replicas.
Predictor Synthetic() {
  Predictor p;
  p.step_time = [](const InstanceType& t, const Config& c) {
    const double speed = t.gpu_model == "V100" ? 2.0 : 1.0;
    const double compute = (0.02 + 0.004 * c.local_bsz) / speed * (c.accum_steps + 1);
    const double sync = c.replicas() > 1 ? 0.05 + 0.01 * c.replicas() * (c.nodes > 1 ? 3 : 1) : 0;
    return Estimate{compute + sync, 0.0};
  };
  p.steps = [](double b) {  // noise scale 2000 samples, 10000 B0-steps at B0 = 32
    const double s = b / 32, r = 2000.0 / 32;
    const double gain = (r + 1) / (r / s + 1);
    return Estimate{10000 / gain, 0.0};
  };
  return p;
}

SearchProblem Problem(const Catalog& c) {
  SearchProblem p;
  p.catalog = &c;
  p.predictor = Synthetic();
  p.space.max_nodes = 4;
  p.space.max_accum_steps = 1;
  p.space.max_local_bsz = 64;
  p.remaining_progress = 10000;
  return p;
}

// One t4x4 node at local batch 32, on demand (the current configuration of several tests).
Config OneT4Node() {
  Config c;
  c.type = "t4x4";
  c.nodes = 1;
  c.gpus_per_node = 4;
  c.local_bsz = 32;
  return c;
}

// Brute force over the same space through Evaluate.
Evaluation BruteForce(const SearchProblem& p, bool feasible_only) {
  Evaluation best;
  best.cost = best.hours = INFINITY;
  bool found = false;
  ForEachCandidate(*p.catalog, p.space, [&](const InstanceType& t, const Config& base) {
    for (Purchase pu : {Purchase::kOnDemand, Purchase::kSpot, Purchase::kAnchor}) {
      if (pu == Purchase::kAnchor && base.nodes < 2) continue;
      Config c = base;
      c.purchase = pu;
      Evaluation e = Evaluate(p, c);
      if (feasible_only && !e.feasible) continue;
      if (!found || e.Objective(p.objective.goal) < best.Objective(p.objective.goal)) best = e;
      found = true;
      (void)t;
    }
  });
  return best;
}

TEST(Search, OptionsDefaultsAreValid) {
  std::string err;
  EXPECT_TRUE(SpaceOptions{}.IsValid(&err)) << err;
  EXPECT_TRUE(ObjectiveOptions{}.IsValid(&err)) << err;
  EXPECT_TRUE(RecommendOptions{}.IsValid(&err)) << err;
  SpaceOptions s;
  s.max_local_bsz = 1;
  EXPECT_FALSE(s.IsValid(&err));
  EXPECT_EQ(err, "max_local_bsz must be >= min_local_bsz");
}

TEST(Search, FindsBruteForceOptimumForEachObjective) {
  Catalog c = SmallCatalog();
  for (Goal g : {Goal::kCost, Goal::kTime}) {
    SearchProblem p = Problem(c);
    p.objective.goal = g;
    SearchResult r = Search(p);
    Evaluation bf = BruteForce(p, true);
    ASSERT_FALSE(r.top.empty());
    EXPECT_TRUE(r.top[0].config == bf.config)
        << r.top[0].config.ToString() << " vs " << bf.config.ToString();
    EXPECT_DOUBLE_EQ(r.top[0].Objective(g), bf.Objective(g));
    for (size_t i = 1; i < r.top.size(); ++i)
      EXPECT_LE(r.top[i - 1].Objective(g), r.top[i].Objective(g));
  }
}

// A correction is a switch: under a deadline, a run must leave that long before it, at its median
// and margin (the part a job corrects assumes it can still move); a budget is not a time and keeps
// no such reserve.
TEST(Search, UnderADeadlineARunLeavesTimeForACorrection) {
  ObjectiveOptions o;
  o.deadline_h = 10;
  o.budget_usd = 100;
  o.uncorrectable_h = 1;
  o.correction_h = 0.05;
  const double extra = std::exp(0.2) - 1;
  EXPECT_DOUBLE_EQ(o.DeadlineMiss(9, 0.2), (9 + extra + 0.05) / 10);
  EXPECT_LE(o.DeadlineMiss(9.94, 0), 1);
  EXPECT_GT(o.DeadlineMiss(9.96, 0), 1);  // met at its median, but with no time left to correct
  EXPECT_DOUBLE_EQ(o.BudgetMiss(9, 95, 0.2), 95 * (1 + extra / 9) / 100);
  o.deadline_h = 0;
  EXPECT_DOUBLE_EQ(o.DeadlineMiss(9.96, 0), 0);
  o.deadline_h = 10;
  std::string err;
  EXPECT_TRUE(o.IsValid(&err)) << err;
  o.correction_h = -1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "correction_h must be >= 0");
}

TEST(Search, RespectsDeadlineAndBudget) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  Evaluation cheapest = BruteForce(p, true);
  // Cheapest within a deadline shorter than the cheapest config's time.
  p.objective.deadline_h = cheapest.hours * 0.5;
  SearchResult r = Search(p);
  ASSERT_TRUE(r.top[0].feasible);
  EXPECT_LE(r.top[0].hours, p.objective.deadline_h);
  EXPECT_TRUE(r.top[0].config == BruteForce(p, true).config);
  EXPECT_GT(r.excluded_by_deadline, 0u);
  // Fastest within a budget.
  p.objective = {};
  p.objective.goal = Goal::kTime;
  p.objective.budget_usd = cheapest.cost * 1.5;
  r = Search(p);
  ASSERT_TRUE(r.top[0].feasible);
  EXPECT_LE(r.top[0].cost, p.objective.budget_usd);
  EXPECT_TRUE(r.top[0].config == BruteForce(p, true).config);
  // The margin covers the part of a run the job cannot correct: the last uncorrectable_h hours
  // must fit constraint_sigmas standard deviations above the estimate.
  ObjectiveOptions o;
  o.deadline_h = 10;
  o.budget_usd = 100;
  EXPECT_DOUBLE_EQ(o.Miss(9, 50, 0.2), 0.9);  // no uncorrectable part: the median
  o.uncorrectable_h = 1;
  const double extra = std::exp(0.2) - 1;
  EXPECT_DOUBLE_EQ(o.Miss(9, 50, 0.2), (9 + extra) / 10);          // 1 h of the 9 h
  EXPECT_DOUBLE_EQ(o.Miss(0.5, 95, 0.2), 95 * (1 + extra) / 100);  // all of a 0.5 h run
  EXPECT_GT(o.Miss(0.5, 95, 0.2), 1);                              // fits only at the median
  o.constraint_sigmas = 0;
  EXPECT_DOUBLE_EQ(o.Miss(0.5, 95, 0.2), 0.95);
  o.constraint_sigmas = -1;
  std::string err;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "constraint_sigmas must be >= 0");
  o.constraint_sigmas = 1;
  o.uncorrectable_h = NAN;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "uncorrectable_h must be >= 0");
  // In the search, the fastest candidate that fits the budget only at its median is excluded
  // when all of its run is uncorrectable.
  const Predictor plain = p.predictor;
  p.predictor.steps = [&plain](double b) { return Estimate{plain.steps(b).value, 0.2}; };
  p.objective = {};
  p.objective.goal = Goal::kTime;
  p.objective.budget_usd = cheapest.cost * 1.5;
  const Evaluation at_median = Search(p).top[0];
  ASSERT_TRUE(at_median.feasible);
  EXPECT_NEAR(at_median.log_sigma, 0.2, 1e-12);
  p.objective.budget_usd = at_median.cost * 1.0001;
  p.objective.uncorrectable_h = 1e6;
  r = Search(p);
  ASSERT_TRUE(r.top[0].feasible);
  EXPECT_FALSE(r.top[0].config == at_median.config);
  EXPECT_LE(r.top[0].cost * std::exp(0.2), p.objective.budget_usd);
  EXPECT_GT(r.excluded_by_budget, 0u);
  // When none meets them, the proposal is the candidate expected to miss them least (brute force
  // over ExpectedExcess agrees), and uncertainty is never rewarded: here the T4 candidates are
  // as uncertain as can be (log_sigma 2), so a chance of meeting the deadline that only their
  // ignorance buys does not make them the proposal; the fast, well-known V100 ones are.
  p.predictor.steps = plain.steps;
  p.predictor.step_time = [&plain](const InstanceType& t, const Config& cfg) {
    return Estimate{plain.step_time(t, cfg).value, t.gpu_model == "V100" ? 0.01 : 2.0};
  };
  p.objective = {};
  const Evaluation fastest = [&] {
    SearchProblem q = p;
    q.objective.goal = Goal::kTime;
    return Search(q).top[0];
  }();
  ASSERT_EQ(p.catalog->types[p.catalog->Find(fastest.config.type)].gpu_model, "V100");
  p.objective.deadline_h = 0.9 * fastest.hours;
  r = Search(p);
  ASSERT_FALSE(r.top[0].feasible);
  Evaluation least_excess, most_likely;
  double best_excess = INFINITY, best_sigmas = INFINITY;
  ForEachCandidate(c, p.space, [&](const InstanceType&, const Config& base) {
    for (Purchase pu : {Purchase::kOnDemand, Purchase::kSpot, Purchase::kAnchor}) {
      if (pu == Purchase::kAnchor && base.nodes < 2) continue;
      Config cfg = base;
      cfg.purchase = pu;
      const Evaluation e = Evaluate(p, cfg);
      const double x = p.objective.ExpectedExcess(e.hours, e.cost, e.log_sigma);
      // The chance of meeting it, in standard deviations of the candidate's own estimate.
      const double sig = std::log(p.objective.Miss(e.hours, e.cost, e.log_sigma)) / e.log_sigma;
      if (x < best_excess) best_excess = x, least_excess = e;
      if (sig < best_sigmas) best_sigmas = sig, most_likely = e;
    }
  });
  EXPECT_TRUE(r.top[0].config == least_excess.config)
      << r.top[0].config.ToString() << " vs " << least_excess.config.ToString();
  EXPECT_EQ(c.types[c.Find(r.top[0].config.type)].gpu_model, "V100");
  EXPECT_EQ(c.types[c.Find(most_likely.config.type)].gpu_model, "T4");  // what "most likely" says
  // The expected excess: (rho - 1)+ without uncertainty, growing with log_sigma at a fixed median,
  // 0 without constraints; past the deadline (a sliver left) it ranks by hours, i.e. the fastest.
  {
    ObjectiveOptions o;
    o.deadline_h = 2;
    EXPECT_NEAR(o.ExpectedExcess(3, 0, 0), 0.5, 1e-12);
    EXPECT_EQ(o.ExpectedExcess(1, 0, 0), 0);
    double last = 0;
    for (double sg : {0.05, 0.2, 0.5, 1.0, 2.0}) {
      const double x = o.ExpectedExcess(3, 0, sg);
      EXPECT_GT(x, last) << sg;
      last = x;
    }
    // Monte Carlo check of the closed form.
    std::mt19937_64 rng(3);
    std::normal_distribution<double> z;
    double sum = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) sum += std::max(0.0, 3 * std::exp(0.5 * z(rng)) / 2 - 1);
    EXPECT_NEAR(o.ExpectedExcess(3, 0, 0.5), sum / n, 0.01);
    o.budget_usd = 10;
    EXPECT_NEAR(o.ExpectedExcess(3, 20, 0), 0.5 + 1.0, 1e-12);
    EXPECT_EQ(ObjectiveOptions{}.ExpectedExcess(3, 20, 0.5), 0);
    o = {};
    o.deadline_h = 1e-6;
    EXPECT_LT(o.ExpectedExcess(1, 0, 0.1), o.ExpectedExcess(2, 0, 0.1));
    EXPECT_LT(o.ExpectedExcess(2, 0, 0.1), o.ExpectedExcess(2, 0, 0.5));
  }
  p.predictor = plain;
  p.objective = {};
  // Space limits.
  p.space.max_nodes = 2;
  p.space.max_gpus = 4;
  p.space.allow_anchor = false;
  size_t n = 0;
  ForEachCandidate(c, p.space, [&](const InstanceType&, const Config& cfg) {
    ++n;
    EXPECT_LE(cfg.nodes, 2);
    EXPECT_LE(cfg.replicas(), 4);
    EXPECT_LE(cfg.local_bsz, 64);
  });
  EXPECT_GT(n, 0u);
  for (const auto& e : Search(p).top) EXPECT_NE(e.config.purchase, Purchase::kAnchor);
  // An impossible deadline: flagged infeasible, the closest miss is proposed.
  p.objective = {};
  p.objective.deadline_h = 1e-6;
  r = Search(p);
  EXPECT_FALSE(r.top[0].feasible);
  EXPECT_EQ(r.feasible, 0u);
}

TEST(Search, SwitchingCostIsCharged) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  Config cur = OneT4Node();
  p.current = &cur;
  Evaluation same = Evaluate(p, cur);
  EXPECT_EQ(same.switch_s, 0);
  Config batch = cur;
  batch.local_bsz = 64;
  EXPECT_EQ(Evaluate(p, batch).switch_s, p.cost.batch_switch_s);
  Config other = cur;
  other.purchase = Purchase::kSpot;
  Evaluation e = Evaluate(p, other);
  EXPECT_EQ(e.switch_s, p.cost.switch_s);
  // Nodes that are gone (spot revoked or refused) are launched again whatever runs next: staying
  // is a switch, and so is another batch on them.
  p.relaunch_current = true;
  EXPECT_EQ(Evaluate(p, cur).switch_s, p.cost.switch_s);
  EXPECT_EQ(Evaluate(p, batch).switch_s, p.cost.switch_s);
  EXPECT_NEAR(Evaluate(p, cur).hours - same.hours, p.cost.switch_s / 3600, 1e-12);
  p.relaunch_current = false;
  p.current = nullptr;
  EXPECT_NEAR(e.hours - Evaluate(p, other).hours, p.cost.switch_s / 3600, 1e-12);
}

// A revocation loses up to one checkpoint interval of work: under a deadline the interval fits the
// slack the candidate leaves (Young/Daly otherwise), and the extra checkpoints are charged.
TEST(Search, CheckpointIntervalFitsTheDeadlineSlack) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  Config spot = OneT4Node();
  spot.purchase = Purchase::kSpot;
  const Evaluation free = Evaluate(p, spot);
  const double young_daly = YoungDalyInterval(p.cost.checkpoint_s, 0.01);  // one spot node
  EXPECT_NEAR(free.checkpoint_interval_s, young_daly, 1e-9);
  ASSERT_GT(young_daly, 3600);
  // A deadline 0.5 h beyond the run: the interval shrinks to about that slack.
  p.objective.deadline_h = free.hours + 0.5;
  const Evaluation tight = Evaluate(p, spot);
  EXPECT_LE(tight.checkpoint_interval_s, 0.5 * 3600 + 1e-9);
  EXPECT_GT(tight.checkpoint_interval_s, 0.4 * 3600);
  EXPECT_GT(tight.hours, free.hours);  // more checkpoints
  EXPECT_TRUE(tight.feasible);
  // A loose deadline leaves Young/Daly alone; a missed one too (it ranks by its lateness).
  p.objective.deadline_h = free.hours + 100;
  EXPECT_NEAR(Evaluate(p, spot).checkpoint_interval_s, young_daly, 1e-9);
  p.objective.deadline_h = free.hours / 2;
  EXPECT_NEAR(Evaluate(p, spot).checkpoint_interval_s, young_daly, 1e-9);
  // On demand there is nothing to lose.
  p.objective.deadline_h = free.hours + 0.5;
  EXPECT_TRUE(std::isinf(Evaluate(p, OneT4Node()).checkpoint_interval_s));
}

// A job that saves its state on the revocation notice (CostOptions::notice_s) loses no work to a
// revocation: spot is priced with the restart and one checkpoint per revocation, and a deadline's
// slack no longer bounds the periodic checkpoints.
TEST(Search, ARevocationSavedOnItsNoticeCostsTheRestartAndACheckpoint) {
  Catalog c = SmallCatalog();
  c.types[0].revocation_per_hour = 0.5;  // t4x4: a spot market like the shipped V100 traces
  SearchProblem p = Problem(c);
  Config spot = OneT4Node();
  spot.purchase = Purchase::kSpot;
  const Evaluation lost = Evaluate(p, spot);
  p.cost.notice_s = 115;
  const Evaluation saved = Evaluate(p, spot);
  const double tau_h = YoungDalyInterval(p.cost.checkpoint_s, 0.5) / 3600;
  const double work_h = lost.hours / (1 + p.cost.checkpoint_s / 3600 / tau_h +
                                      0.5 * (p.cost.restart_s / 3600 + tau_h / 2));
  EXPECT_NEAR(saved.hours,
              work_h * (1 + p.cost.checkpoint_s / 3600 / tau_h +
                        0.5 * (p.cost.restart_s + p.cost.checkpoint_s) / 3600),
              1e-9 * work_h);
  EXPECT_LT(saved.cost, lost.cost);
  EXPECT_NEAR(saved.checkpoint_interval_s, lost.checkpoint_interval_s, 1e-9);
  // Under a deadline 0.05 h beyond the run, the job that loses work checkpoints within the slack;
  // the one that saves on the notice keeps Young/Daly.
  p.objective.deadline_h = saved.hours + 0.05;
  EXPECT_NEAR(Evaluate(p, spot).checkpoint_interval_s, tau_h * 3600, 1e-6);
  p.cost.notice_s = 0;
  p.objective.deadline_h = lost.hours + 0.05;
  EXPECT_LE(Evaluate(p, spot).checkpoint_interval_s, 0.05 * 3600 + 1e-9);
  // A notice too short for a checkpoint saves nothing.
  p.objective.deadline_h = 0;
  p.cost.notice_s = p.cost.checkpoint_s / 2;
  EXPECT_DOUBLE_EQ(Evaluate(p, spot).cost, lost.cost);
}

// Observe, then grow: with a noise scale far above every batch, the fastest configuration is the
// largest batch; the search proposes at most max_batch_growth x the largest observed batch, and
// goes further once the job has run (observed) the batch it proposed.
TEST(Search, GrowsTheBatchOnlyAsFarAsTheEvidence) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  p.objective.goal = Goal::kTime;
  Config cur;
  cur.type = "t4x1";
  cur.local_bsz = 16;
  p.current = &cur;
  p.space.max_batch_growth = 0;  // no bound
  p.space.observed_batch = 16;
  const long long unbounded = Search(p).top[0].config.global_batch();
  ASSERT_GT(unbounded, 4 * 16 * 4);  // the extrapolation alone would jump far
  p.space.max_batch_growth = 4;
  EXPECT_EQ(p.space.GrowthBound(cur.global_batch()), 64);
  long long observed = 16;
  std::vector<long long> proposed;
  for (int decision = 0; decision < 6; ++decision) {
    p.space.observed_batch = static_cast<double>(observed);
    SearchResult r = Search(p);
    ASSERT_FALSE(r.top.empty());
    for (const Evaluation& e : r.top) EXPECT_LE(e.config.global_batch(), 4 * observed);
    proposed.push_back(r.top[0].config.global_batch());
    EXPECT_GT(proposed.back(), observed) << "decision " << decision;  // grows after observing
    EXPECT_LE(proposed.back(), unbounded);
    observed = std::max(observed, proposed.back());  // the job runs it
    if (observed == unbounded) break;
  }
  EXPECT_EQ(proposed.back(), unbounded) << "reaches the unbounded optimum step by step";
  EXPECT_GE(proposed.size(), 2u);
  // The current configuration's batch is never cut off, even above the bound.
  cur.local_bsz = 64;
  cur.type = "t4x4";
  cur.gpus_per_node = 4;
  p.space.observed_batch = 16;
  EXPECT_EQ(p.space.GrowthBound(cur.global_batch()), cur.global_batch());
  bool current_seen = false;
  p.candidates = {cur};
  Config small = cur;
  small.local_bsz = 8;
  p.candidates.push_back(small);
  for (const Evaluation& e : Search(p).top) current_seen = current_seen || e.config == cur;
  EXPECT_TRUE(current_seen);
  // Explicit candidates obey the bound, but the smallest is always kept.
  p.current = nullptr;
  Config big = cur;
  big.nodes = 4;
  p.candidates = {big};
  SearchResult only = Search(p);
  ASSERT_FALSE(only.top.empty());
  EXPECT_EQ(only.top[0].config.global_batch(), big.global_batch());
  p.candidates.push_back(small);
  for (const Evaluation& e : Search(p).top) EXPECT_NE(e.config.nodes, 4);
  std::string err;
  p.space.max_batch_growth = 0.5;
  EXPECT_FALSE(p.space.IsValid(&err));
  EXPECT_EQ(err, "max_batch_growth must be >= 1, or 0 (no bound)");
}

// Observe, then grow, toward a plan: when the growth bound keeps every candidate from meeting the
// deadline but a larger batch would meet it, the proposal is the plan's instances at the largest
// batch within the bound, carrying the plan's estimate, not the largest (least-late) cluster.
TEST(Search, StepsTowardAPlanWhenNothingWithinTheGrowthBoundMeetsTheDeadline) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  Config cur;
  cur.type = "t4x1";
  cur.local_bsz = 16;
  p.current = &cur;
  p.space.observed_batch = 16;
  p.space.max_batch_growth = 4;
  const long long bound = p.space.GrowthBound(cur.global_batch());
  ASSERT_EQ(bound, 64);
  p.objective.goal = Goal::kTime;
  const double bounded_h = Search(p).top[0].hours;
  p.space.max_batch_growth = 0;
  const double unbounded_h = Search(p).top[0].hours;
  ASSERT_LT(unbounded_h, 0.8 * bounded_h);
  p.space.max_batch_growth = 4;
  p.objective.goal = Goal::kCost;
  p.objective.deadline_h = std::sqrt(bounded_h * unbounded_h);
  SearchResult r = Search(p);
  ASSERT_TRUE(r.has_plan);
  ASSERT_FALSE(r.top.empty());
  const Evaluation& step = r.top[0];
  EXPECT_TRUE(step.feasible);
  EXPECT_GT(r.plan.config.global_batch(), bound);
  EXPECT_LE(r.plan.hours, p.objective.deadline_h);
  EXPECT_TRUE(step.config.SameHardware(r.plan.config)) << step.config.ToString();
  EXPECT_LE(step.config.global_batch(), bound);
  EXPECT_DOUBLE_EQ(step.hours, r.plan.hours);
  EXPECT_DOUBLE_EQ(step.cost, r.plan.cost);
  // The largest batch within the bound on those instances.
  ForEachCandidate(c, p.space, [&](const InstanceType&, const Config& k) {
    Config o = k;
    o.purchase = step.config.purchase;
    if (o.SameHardware(step.config) && o.global_batch() <= bound) {
      EXPECT_LE(o.global_batch(), step.config.global_batch()) << o.ToString();
    }
  });
  // The plan is the cheapest candidate beyond the bound that meets the deadline.
  p.space.max_batch_growth = 0;
  for (const Evaluation& e : Search(p).top)
    if (e.feasible && e.config.global_batch() > bound) {
      EXPECT_GE(e.cost, r.plan.cost * (1 - 1e-12));
    }
  // Without the plan, every candidate within the bound misses: the least-late is the proposal.
  p.space.max_batch_growth = 4;
  for (size_t i = 1; i < r.top.size(); ++i) EXPECT_FALSE(r.top[i].feasible);
  const Recommendation d = Decide(p, {}, [](const Config&) { return true; });
  EXPECT_EQ(d.proposed.config, step.config) << d.reason;
  EXPECT_NE(d.reason.find("toward " + r.plan.config.ToString()), std::string::npos) << d.reason;
  // A deadline that a batch within the bound meets: no plan, the search is as before.
  p.objective.deadline_h = 1.5 * bounded_h;
  r = Search(p);
  EXPECT_FALSE(r.has_plan);
  EXPECT_TRUE(r.top[0].feasible);
  EXPECT_LE(r.top[0].config.global_batch(), bound);
}

// Candidates that miss a constraint only on their median estimate are kept apart for exploration:
// the cheapest that would meet it two standard deviations faster, each infeasible, best first.
TEST(Search, KeepsCandidatesThatMissOnlyOnTheirMedian) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  p.space.types = {"t4x4", "v100x4"};
  Predictor base = Synthetic();
  p.predictor.step_time = [base](const InstanceType& t, const Config& cfg) {
    Estimate e = base.step_time(t, cfg);
    if (t.gpu_model == "V100") e.value *= 1.4, e.log_sigma = 0.6;  // projected, uncertain
    return e;
  };
  p.objective.goal = Goal::kCost;
  p.keep_top = 4;
  p.space.types = {"v100x4"};
  const double v100_h = Search(p).top[0].hours;  // the cheapest V100 run, no deadline
  p.space.types = {"t4x4", "v100x4"};
  p.objective.deadline_h = 0.9 * v100_h;
  const SearchResult r = Search(p);
  ASSERT_FALSE(r.promising.empty());
  EXPECT_LE(r.promising.size(), 4u);
  for (size_t i = 0; i < r.promising.size(); ++i) {
    const Evaluation& e = r.promising[i];
    EXPECT_FALSE(e.feasible);
    EXPECT_GT(p.objective.Miss(e.hours, e.cost, e.log_sigma), 1);
    EXPECT_LE(p.objective.Miss(e.hours, e.cost, e.log_sigma) * std::exp(-2 * e.log_sigma), 1);
    if (i) {
      EXPECT_LE(r.promising[i - 1].cost, e.cost);
    }
  }
  EXPECT_EQ(r.promising[0].config.type, "v100x4");
  // Exploration weighs them even when the feasible candidates fill the list it ranks.
  Config cur = OneT4Node();
  cur.purchase = Purchase::kSpot;
  p.current = &cur;
  p.remaining_progress *= 500;
  auto steps = base.steps;
  p.predictor.steps = [steps](double b) {
    Estimate e = steps(b);
    e.value *= 500;
    return e;
  };
  p.objective.deadline_h *= 500;
  RecommendOptions o;
  o.explore_candidates = 1;
  const Recommendation d = Decide(p, o, [](const Config& k) { return k.type != "v100x4"; });
  EXPECT_TRUE(d.best.feasible);
  EXPECT_EQ(d.best.config.type, "t4x4") << d.reason;
  EXPECT_EQ(d.action, Recommendation::Action::kMeasure) << d.reason;
  EXPECT_EQ(d.proposed.config.type, "v100x4") << d.reason;
  EXPECT_FALSE(d.proposed.feasible);
  // A certain estimate that misses is not promising.
  p.predictor = Synthetic();
  for (const Evaluation& e : Search(p).promising) ADD_FAILURE() << e.config.ToString();
}

// Spot capacity: a candidate that needs more spot nodes than can be had is out, unless the
// shortage is waited out (then only anchor candidates, whose anchor would pay, still need them).
TEST(Search, SpotCapacityLimitsOrIsWaitedOut) {
  const Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  p.objective.goal = Goal::kCost;
  p.keep_top = 100000;
  auto counts = [&](const SearchProblem& q) {
    int spot_big = 0, anchor_big = 0;
    for (const Evaluation& e : Search(q).top) {
      if (e.config.type != "t4x4") continue;
      if (e.config.purchase == Purchase::kSpot && e.config.nodes > 1) ++spot_big;
      if (e.config.purchase == Purchase::kAnchor && e.config.nodes - 1 > 1) ++anchor_big;
    }
    return std::make_pair(spot_big, anchor_big);
  };
  const auto all = counts(p);
  ASSERT_GT(all.first, 0);
  ASSERT_GT(all.second, 0);
  p.space.spot_nodes_available = {{"t4x4", 1}};
  EXPECT_EQ(counts(p), std::make_pair(0, 0));
  p.space.wait_for_spot = true;
  EXPECT_EQ(counts(p), std::make_pair(all.first, 0));
}

TEST(Search, ParetoFrontIsNonDominated) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  auto front = ParetoFront(p);
  ASSERT_GE(front.size(), 2u);
  for (size_t i = 1; i < front.size(); ++i) {
    EXPECT_GE(front[i].hours, front[i - 1].hours);
    EXPECT_LT(front[i].cost, front[i - 1].cost);
  }
  EXPECT_DOUBLE_EQ(front.back().cost, BruteForce(p, false).cost);
}

// What the throughput model over types learns of an unmeasured type comes from the catalog
// (estimator/throughput_types.h projects it); FLOPP ranks by TFLOPS per dollar.
TEST(Search, HardwareAndFloppFromTheCatalog) {
  Catalog c = SmallCatalog();
  const InstanceType& t4 = c.types[c.Find("t4x4")];
  const estimator::Hardware v = HardwareOf(c, "v100x4");
  EXPECT_DOUBLE_EQ(v.memory_bandwidth_gbs, 900);
  EXPECT_DOUBLE_EQ(v.network_gbps, 10);
  EXPECT_DOUBLE_EQ(HardwareOf(c, "t4").memory_bandwidth_gbs, 300);  // a GPU model's name
  EXPECT_FALSE(HardwareOf(c, "nowhere").known());
  EXPECT_GT(Flopp(c, t4, Purchase::kSpot), Flopp(c, t4, Purchase::kOnDemand));
}

// A measurement beyond the largest batch the job has observed also records the noise there: it
// reveals the steps' extrapolation, not only the step time (all certain here).
TEST(Decide, AMeasurementBeyondTheObservedBatchRevealsItsStepsToo) {
  Catalog c = SmallCatalog();
  Config cur = OneT4Node();  // global batch 128
  cur.purchase = Purchase::kSpot;
  auto run = [&](double observed_batch) {
    SearchProblem p = Problem(c);
    p.space.allow_anchor = false;
    p.space.types = {"t4x4"};
    p.space.observed_batch = observed_batch;
    p.predictor.steps = [base = Synthetic()](double b) {  // a long job, spread beyond 128
      return Estimate{500 * base.steps(b).value, 0.02 + (b > 128 ? 0.4 * std::log(b / 128) : 0)};
    };
    p.current = &cur;
    return Decide(p, {}, [&cur](const Config& cfg) { return cfg == cur; });
  };
  const Recommendation r = run(128);
  ASSERT_EQ(r.action, Recommendation::Action::kMeasure) << r.reason;
  EXPECT_GT(r.proposed.config.global_batch(), 128) << r.reason;
  EXPECT_NE(r.reason.find("step time and steps ±"), std::string::npos) << r.reason;
  EXPECT_GT(r.expected_improvement, r.measurement_cost);
  // Nothing to reveal with the observed batch unknown, or beyond every batch the space holds.
  for (double observed : {0.0, 1e6}) EXPECT_NE(run(observed).action, r.action) << observed;
}

TEST(Decide, MeasuresUncertainTypeOnlyWhenItCanPayOff) {
  Catalog c = SmallCatalog();
  Config cur;
  cur.type = "t4x4";
  cur.gpus_per_node = 4;
  cur.local_bsz = 32;
  cur.purchase = Purchase::kSpot;
  auto run = [&](double v100_sigma, double remaining_scale, RecommendOptions o = {},
                 double steps_sigma = 0, double budget_usd = 0, int keep_top = 8) {
    SearchProblem p = Problem(c);
    p.keep_top = keep_top;
    p.objective.budget_usd = budget_usd;
    p.space.allow_anchor = false;
    p.space.types = {"t4x4", "v100x4"};
    Predictor base = Synthetic();
    p.predictor.step_time = [base, v100_sigma](const InstanceType& t, const Config& cfg) {
      Estimate e = base.step_time(t, cfg);
      if (t.gpu_model == "V100") {  // unmeasured: projected slower than it may be
        e.value *= 1.4;
        e.log_sigma = v100_sigma;
      }
      return e;
    };
    p.predictor.steps = [base, remaining_scale, steps_sigma](double b) {
      Estimate e = base.steps(b);
      e.value *= remaining_scale;
      e.log_sigma = steps_sigma;
      return e;
    };
    p.current = &cur;
    return Decide(p, o, [](const Config& cfg) { return cfg.type != "v100x4"; });
  };
  // Certain projection: nothing to learn.
  EXPECT_NE(run(0.0, 1).action, Recommendation::Action::kMeasure);
  // Uncertain and a long job ahead: the expected improvement pays for the measurement.
  Recommendation r = run(0.6, 500);
  EXPECT_EQ(r.best.config.type, "t4x4") << r.reason;
  EXPECT_EQ(r.action, Recommendation::Action::kMeasure) << r.reason;
  EXPECT_EQ(r.proposed.config.type, "v100x4");
  EXPECT_GT(r.expected_improvement, r.measurement_cost);
  // Same uncertainty but almost done: not worth it.
  EXPECT_NE(run(0.6, 0.01).action, Recommendation::Action::kMeasure);
  // Uncertain steps to the target (statistical efficiency) are not what a throughput
  // measurement reveals: a certain step time with uncertain steps is not measured.
  Recommendation s = run(0.0, 500, {}, 0.6);
  EXPECT_NE(s.action, Recommendation::Action::kMeasure) << s.reason;
  EXPECT_GT(s.best.log_sigma, 0.5);
  // ... while the step-time part still is, and the reason shows the step time's uncertainty.
  s = run(0.6, 500, {}, 0.6);
  EXPECT_EQ(s.action, Recommendation::Action::kMeasure) << s.reason;
  EXPECT_NE(s.reason.find("step time ±60%"), std::string::npos) << s.reason;
  EXPECT_NEAR(s.expected_improvement, r.expected_improvement, 1e-9 * r.expected_improvement);
  // The exploration budget: no measurement once measuring has used its share of the expected
  // total (spent + best predicted remaining).
  const double total = r.best.cost;  // nothing spent yet
  RecommendOptions o;
  o.exploration_budget_share = 0;
  EXPECT_NE(run(0.6, 500, o).action, Recommendation::Action::kMeasure);
  o.exploration_budget_share = 0.04;
  o.spent = 10 * total;
  o.exploration_spent = 0.04 * (o.spent + total);  // the budget is used up
  EXPECT_NE(run(0.6, 500, o).action, Recommendation::Action::kMeasure);
  o.exploration_spent = 0.04 * (o.spent + total) - 2 * r.measurement_cost;  // room for one more
  EXPECT_EQ(run(0.6, 500, o).action, Recommendation::Action::kMeasure);
  // Safe exploration: no measurement the budget could not pay for should it disappoint (the
  // incumbent's cost plus the measurement's); a budget that does not bind changes nothing.
  EXPECT_NE(run(0.6, 500, {}, 0, r.best.cost + 0.5 * r.measurement_cost).action,
            Recommendation::Action::kMeasure);
  const Recommendation roomy = run(0.6, 500, {}, 0, 100 * r.best.cost);
  EXPECT_EQ(roomy.action, Recommendation::Action::kMeasure) << roomy.reason;
  EXPECT_NEAR(roomy.expected_improvement, r.expected_improvement, 1e-9 * r.expected_improvement);
  // When nothing is predicted to meet the budget, measuring the uncertain type is the way to find
  // out whether it would: the expected reduction of the excess over the budget pays for it.
  const double tight = 0.8 * r.best.cost;
  const Recommendation none = run(0.6, 500, {}, 0, tight);
  ASSERT_FALSE(none.best.feasible) << none.reason;
  EXPECT_EQ(none.action, Recommendation::Action::kMeasure) << none.reason;
  EXPECT_EQ(none.proposed.config.type, "v100x4");
  EXPECT_NE(none.reason.find("lowers the expected excess"), std::string::npos) << none.reason;
  EXPECT_GT(none.expected_improvement, none.measurement_cost);
  // ... also when it ranks below every candidate the search keeps: at two standard deviations
  // faster it would meet the budget, so it is among the promising ones.
  RecommendOptions one;
  one.explore_candidates = 1;
  const Recommendation kept_out = run(0.6, 500, one, 0, tight, 1);
  EXPECT_EQ(kept_out.action, Recommendation::Action::kMeasure) << kept_out.reason;
  EXPECT_EQ(kept_out.proposed.config.type, "v100x4");
  // ... but not when its projection is certain: nothing to learn.
  EXPECT_NE(run(0.0, 500, {}, 0, tight).action, Recommendation::Action::kMeasure);
  std::string err;
  o.exploration_spent = o.spent + 1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "spent and exploration_spent must be >= 0 with exploration_spent <= spent");
}

// When no candidate meets the deadline, the job moves to the one expected to be least late, but
// only when that is clearly less late than staying (the hysteresis): estimates that all miss are
// noisy, and a switch at every decision would only add switching time.
TEST(Decide, WhenNoneMeetsTheDeadlineSwitchesOnlyToTheClearlyLeastLate) {
  Catalog c = SmallCatalog();
  SearchProblem p = Problem(c);
  p.space.allow_anchor = false;
  Config cur = OneT4Node();
  p.current = &cur;
  p.objective.deadline_h = 1e-6;  // already missed: every candidate misses it
  auto measured = [](const Config&) { return true; };
  RecommendOptions o;
  Recommendation r = Decide(p, o, measured);
  ASSERT_FALSE(r.best.feasible);
  ASSERT_FALSE(r.best.config == cur);
  EXPECT_EQ(r.action, Recommendation::Action::kSwitch) << r.reason;
  EXPECT_LT(r.best.hours, r.current.hours);  // past the deadline: the fastest
  EXPECT_NE(r.reason.find("expected to miss them least"), std::string::npos) << r.reason;
  // Staying where the least late one already runs.
  Config there = r.best.config;
  p.current = &there;
  EXPECT_EQ(Decide(p, o, measured).action, Recommendation::Action::kKeep);
  // Among those expected to miss about as little as the least late one (within the hysteresis),
  // the cheapest: here the same hardware on spot (its revocations make it a little later).
  const auto excess = [&](const Evaluation& e) {
    return p.objective.ExpectedExcess(e.hours, e.cost, e.log_sigma);
  };
  RecommendOptions strict = o;
  strict.hysteresis = 0;
  p.current = &cur;
  const Recommendation least = Decide(p, strict, measured);
  ASSERT_FALSE(least.best.feasible);
  EXPECT_LE(excess(least.best), excess(r.best));
  EXPECT_LE(excess(r.best), (1 + o.hysteresis) * excess(least.best));
  EXPECT_LT(r.best.cost, 0.5 * least.best.cost)
      << r.best.config.ToString() << " vs " << least.best.config.ToString();
  EXPECT_EQ(r.best.config.type, least.best.config.type);
  EXPECT_EQ(r.best.config.nodes, least.best.config.nodes);
  EXPECT_EQ(r.best.config.global_batch(), least.best.config.global_batch());
  EXPECT_EQ(r.best.config.purchase, Purchase::kSpot);
  // Running the least late one, it stays: the switch to spot would make it later by more than the
  // hysteresis.
  Config fastest = least.best.config;
  p.current = &fastest;
  const Recommendation stay = Decide(p, o, measured);
  EXPECT_EQ(stay.action, Recommendation::Action::kKeep) << stay.reason;
  EXPECT_TRUE(stay.proposed.config == fastest);
  EXPECT_NE(stay.reason.find("keeping the current configuration"), std::string::npos)
      << stay.reason;
}

TEST(Decide, ExpectedImprovementClosedForm) {
  EXPECT_DOUBLE_EQ(ExpectedImprovement(10, 8, 0), 2);
  EXPECT_DOUBLE_EQ(ExpectedImprovement(10, 12, 0), 0);
  // Monte-Carlo-free check: symmetric case median = incumbent, EI grows with sigma.
  EXPECT_GT(ExpectedImprovement(10, 10, 0.5), ExpectedImprovement(10, 10, 0.1));
  EXPECT_NEAR(ExpectedImprovement(10, 10, 1e-3), 10 * 1e-3 / std::sqrt(2 * M_PI), 1e-4);
  // With a constraint: only the outcomes X <= max_factor count. Against a Monte-Carlo estimate
  // of E[(10 − 12X) 1{X <= 0.8}] (a candidate predicted to cost more and to miss its budget by
  // 25 %), and the limits: no constraint = plain EI; max_factor above 10/12 changes nothing.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> z(0.0, 0.4);
  double mc = 0;
  const int n = 400000;
  for (int i = 0; i < n; ++i) {
    const double x = std::exp(z(rng));
    if (x <= 0.8) mc += std::max(0.0, 10 - 12 * x);
  }
  mc /= n;
  EXPECT_NEAR(ExpectedImprovement(10, 12, 0.4, 0.8), mc, 0.01 * mc + 1e-3);
  EXPECT_GT(ExpectedImprovement(10, 12, 0.4, 0.8), 0);
  EXPECT_LT(ExpectedImprovement(10, 12, 0.4, 0.8), ExpectedImprovement(10, 12, 0.4));
  EXPECT_DOUBLE_EQ(ExpectedImprovement(10, 12, 0.4, 0.9), ExpectedImprovement(10, 12, 0.4));
  EXPECT_DOUBLE_EQ(ExpectedImprovement(10, 8, 0, 0.9), 0);  // certain and over its budget
  EXPECT_DOUBLE_EQ(ExpectedImprovement(10, 8, 0, 1.1), 2);
}

}  // namespace
}  // namespace cloudtune::search
