#include "search/cost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace cloudtune::search {
namespace {

InstanceType Type() {
  InstanceType t;
  t.name = "x";
  t.gpus = 4;
  t.ondemand_per_hour = 4.0;
  t.spot_per_hour = 1.0;
  t.revocation_per_hour = 0.01;
  return t;
}

TEST(Cost, OptionsDefaultsAreValid) {
  std::string err;
  EXPECT_TRUE(CostOptions{}.IsValid(&err)) << err;
  CostOptions o;
  o.checkpoint_s = 0;
  EXPECT_FALSE(o.IsValid(&err));
}

TEST(Cost, PricesByPurchaseOption) {
  InstanceType t = Type();
  EXPECT_DOUBLE_EQ(HourlyPrice(t, 3, Purchase::kOnDemand), 12.0);
  EXPECT_DOUBLE_EQ(HourlyPrice(t, 3, Purchase::kSpot), 3.0);
  EXPECT_DOUBLE_EQ(HourlyPrice(t, 3, Purchase::kAnchor), 4.0 + 2 * 1.0);  // 1 on-demand anchor
  EXPECT_DOUBLE_EQ(ClusterRevocationRate(t, 3, Purchase::kSpot), 0.03);
  EXPECT_DOUBLE_EQ(ClusterRevocationRate(t, 3, Purchase::kAnchor), 0.02);
  EXPECT_DOUBLE_EQ(ClusterRevocationRate(t, 3, Purchase::kOnDemand), 0.0);
  EXPECT_EQ(SpotNodes(3, Purchase::kSpot), 3);
  EXPECT_EQ(SpotNodes(3, Purchase::kAnchor), 2);
  EXPECT_EQ(SpotNodes(1, Purchase::kAnchor), 0);
  EXPECT_EQ(SpotNodes(3, Purchase::kOnDemand), 0);
  t.spot_per_hour = -1;  // no spot offer: spot falls back to on-demand, never revoked
  EXPECT_DOUBLE_EQ(HourlyPrice(t, 2, Purchase::kSpot), 8.0);
  EXPECT_DOUBLE_EQ(ClusterRevocationRate(t, 2, Purchase::kSpot), 0.0);
}

// The revocation rate a job learns from its own spot exposure: the catalog's rate weighs as
// revocation_prior_node_hours of observation.
TEST(Cost, LearnsTheRevocationRateFromTheJobsExposure) {
  const double lam = 1e-4, t0 = 24;
  EXPECT_DOUBLE_EQ(LearnedRevocationRate(lam, {}, t0), lam);  // nothing seen: the catalog's
  // 76 node-hours without a revocation: (1e-4 * 24 + 0) / 100.
  EXPECT_DOUBLE_EQ(LearnedRevocationRate(lam, {76, 0}, t0), lam * 24 / 100);
  // 3 revocations in 16 node-hours: (0.0024 + 3) / 40, ~750x the catalog's.
  const double learned = LearnedRevocationRate(lam, {16, 3}, t0);
  EXPECT_DOUBLE_EQ(learned, (lam * 24 + 3) / 40);
  EXPECT_GT(learned, 700 * lam);
  // More exposure at the same frequency moves the estimate toward the observed 3/16 per hour.
  EXPECT_NEAR(LearnedRevocationRate(lam, {1600, 300}, t0), 300.0 / 1600, 0.003);
  // A catalog with the type: its rate and source change; other types and unknown names do not.
  Catalog c;
  c.types = {Type(), Type()};
  c.types[1].name = "y";
  LearnRevocationRates({{"x", {10, 2}}, {"unknown", {5, 1}}}, t0, &c);
  EXPECT_DOUBLE_EQ(c.types[0].revocation_per_hour, (0.01 * 24 + 2) / 34);
  EXPECT_EQ(c.types[0].revocation_source, "learned: 2 revocations in 10.0 node-hours");
  EXPECT_DOUBLE_EQ(c.types[1].revocation_per_hour, 0.01);
  // The learned rate shortens the checkpoint interval and raises the expected cost of spot.
  const RunEstimate before = EstimateRun(10, 1.0, 0.01, 30, 120);
  const RunEstimate after = EstimateRun(10, 1.0, c.types[0].revocation_per_hour, 30, 120);
  // (0.24 + 2) / 34 = 0.066 per hour against 0.01: the interval shrinks by sqrt(6.6).
  EXPECT_NEAR(before.checkpoint_interval_s / after.checkpoint_interval_s,
              std::sqrt(2.24 / 34 / 0.01), 1e-9);
  EXPECT_GT(after.cost, before.cost);
  CostOptions o;
  std::string err;
  o.revocation_prior_node_hours = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "revocation_prior_node_hours must be > 0");
}

TEST(Cost, YoungDalyInterval) {
  // sqrt(2 C / λ): C = 36 s, λ = 0.02/h -> sqrt(2 * 0.01 h / 0.02) = 1 h.
  EXPECT_NEAR(YoungDalyInterval(36, 0.02), 3600.0, 1e-9);
  EXPECT_TRUE(std::isinf(YoungDalyInterval(36, 0)));
}

TEST(Cost, ExpectedRunHandComputed) {
  // W = 10 h, λ = 0.02/h, C = 36 s (0.01 h), R = 360 s (0.1 h): τ = 1 h,
  // overhead = C/τ + λ (R + τ/2) = 0.01 + 0.02 * 0.6 = 0.022 -> 10.22 h, at $3/h = $30.66.
  RunEstimate r = EstimateRun(10, 3.0, 0.02, 36, 360);
  EXPECT_NEAR(r.checkpoint_interval_s, 3600, 1e-9);
  EXPECT_NEAR(r.hours, 10.22, 1e-12);
  EXPECT_NEAR(r.cost, 30.66, 1e-12);
  EXPECT_NEAR(r.revocations, 0.02 * 10.22, 1e-12);
  RunEstimate od = EstimateRun(10, 12.0, 0, 36, 360);
  EXPECT_DOUBLE_EQ(od.hours, 10);
  EXPECT_DOUBLE_EQ(od.cost, 120);
  // Young/Daly minimises the overhead: other intervals do worse.
  const double c = 0.01, lam = 0.02, rr = 0.1;
  auto overhead = [&](double tau) { return c / tau + lam * (rr + tau / 2); };
  EXPECT_LT(overhead(1.0), overhead(0.8));
  EXPECT_LT(overhead(1.0), overhead(1.25));
}

TEST(Cost, ARevocationSavedOnItsNoticeLosesNoWork) {
  // W = 10 h, λ = 0.5/h, C = 36 s (0.01 h), R = 360 s (0.1 h): τ = sqrt(2 C / λ) = 0.2 h.
  // Without a notice: overhead = C/τ + λ (R + τ/2) = 0.05 + 0.5 * 0.2 = 0.15 -> 11.5 h.
  // Saved on the notice: C/τ + λ (R + C) = 0.05 + 0.5 * 0.11 = 0.105 -> 11.05 h.
  const RunEstimate lost = EstimateRun(10, 2.0, 0.5, 36, 360);
  const RunEstimate saved =
      EstimateRun(10, 2.0, 0.5, 36, 360, std::numeric_limits<double>::infinity(), true);
  EXPECT_NEAR(lost.hours, 11.5, 1e-12);
  EXPECT_NEAR(saved.hours, 11.05, 1e-12);
  EXPECT_NEAR(saved.cost, 22.1, 1e-12);
  // The periodic checkpoints stay (a revocation the notice misses): the same interval.
  EXPECT_NEAR(saved.checkpoint_interval_s, lost.checkpoint_interval_s, 1e-9);
  EXPECT_NEAR(saved.checkpoint_interval_s, 720, 1e-9);

  // A notice saves the state only when it leaves the time for a checkpoint.
  CostOptions o;
  EXPECT_FALSE(o.SavesOnNotice(o.checkpoint_s));  // default: the job does not watch
  o.notice_s = 115;                               // AWS's 2 minutes less a 5-s poll
  EXPECT_TRUE(o.SavesOnNotice(30));
  EXPECT_FALSE(o.SavesOnNotice(120));
  o.notice_s = 25;  // GCP's 30 s less a 5-s poll: too short for a 30-s checkpoint
  EXPECT_FALSE(o.SavesOnNotice(30));
  EXPECT_TRUE(o.SavesOnNotice(5));  // an anchor's checkpoint
  std::string err;
  o.notice_s = -1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "notice_s must be >= 0");
}

}  // namespace
}  // namespace cloudtune::search
