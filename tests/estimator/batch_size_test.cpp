#include "estimator/batch_size.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "tests/shared_data.h"

namespace cloudtune::estimator {
namespace {

// Step time of a micro-step alpha + beta * b, (a + 1) micro-steps per optimizer step.
BatchSizeController::StepTimeFn Linear(double alpha, double beta) {
  return [=](int b, int a) { return (a + 1) * (alpha + beta * b); };
}

// A noise state where efficiency ~ 1 at every batch: goodput = throughput.
const NoiseState kNoisy{1e-9, 1.0, 32};

TEST(BatchSize, DefaultOptionsAreValidAndBadOnesAreNamed) {
  std::string err;
  EXPECT_TRUE(BatchSizeOptions{}.IsValid(&err)) << err;
  BatchSizeOptions o;
  o.switch_threshold = -0.1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "switch_threshold must be >= 0");
  o = {};
  o.max_local_batch = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "max_local_batch must be >= min_local_batch");
  o = {};
  o.oom_backoff = 1.5;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "oom_backoff must be in (0, 1]");
  EXPECT_THROW(BatchSizeController{o}, std::invalid_argument);
}

TEST(BatchSize, LrScalingRules) {
  // gain at s = 4 with r = 3: 4 / 1.75
  const double gain = 4.0 / 1.75;
  EXPECT_DOUBLE_EQ(LrScale(LrScaling::kAdaScale, 128, 32, gain), gain);
  EXPECT_DOUBLE_EQ(LrScale(LrScaling::kSquareRoot, 128, 32, gain), 2.0);
  EXPECT_DOUBLE_EQ(LrScale(LrScaling::kLinear, 128, 32, gain), 4.0);
  LrScaling r = LrScaling::kLinear;
  EXPECT_TRUE(ParseLrScaling("sqrt", &r));
  EXPECT_EQ(r, LrScaling::kSquareRoot);
  EXPECT_FALSE(ParseLrScaling("cubic", &r));
  EXPECT_EQ(r, LrScaling::kSquareRoot);
  EXPECT_STREQ(LrScalingName(LrScaling::kAdaScale), "adascale");

  // Applied with a decision: r = 3 at B0 = 32; cap 32 per worker on 4 workers -> B = 128.
  const NoiseState s{1.0, 3.0, 32};
  for (auto rule : {LrScaling::kAdaScale, LrScaling::kSquareRoot, LrScaling::kLinear}) {
    BatchSizeOptions o;
    o.max_local_batch = 32;
    o.min_local_batch = 32;
    o.max_accum_steps = 0;
    o.lr_scaling = rule;
    BatchSizeController c(o);
    auto d = c.Recommend(4, Linear(1.0, 0.0), s, 8, 0);  // currently 8 per worker: B = 32
    EXPECT_TRUE(d.switched);
    EXPECT_EQ(d.global_batch, 128);
    const double expect = rule == LrScaling::kAdaScale     ? gain
                          : rule == LrScaling::kSquareRoot ? 2.0
                                                           : 4.0;
    EXPECT_NEAR(d.lr_scale, expect, 1e-12) << LrScalingName(rule);
    // Current B = 32 = B0 has scale 1 under every rule.
    EXPECT_NEAR(d.lr_factor, expect, 1e-12) << LrScalingName(rule);
  }
}

TEST(BatchSize, HysteresisThreshold) {
  // Throughput b / (1 + 0.01 b) grows with b; with cap 64 the best is 64.
  BatchSizeOptions o;
  o.max_local_batch = 64;
  o.max_accum_steps = 0;
  BatchSizeController c(o);
  // From 60: 64 * 1.6 / (60 * 1.64) - 1 = 4.07% < 5%: stay.
  auto stay = c.Recommend(1, Linear(1.0, 0.01), kNoisy, 60, 0);
  EXPECT_FALSE(stay.switched);
  EXPECT_EQ(stay.local_bsz, 60);
  EXPECT_NEAR(stay.predicted_gain, 64 * 1.6 / (60 * 1.64) - 1, 1e-3);
  EXPECT_LT(stay.goodput, stay.best_goodput);
  // From 48: 20.3% > 5%: switch to 64.
  auto go = c.Recommend(1, Linear(1.0, 0.01), kNoisy, 48, 0);
  EXPECT_TRUE(go.switched);
  EXPECT_EQ(go.local_bsz, 64);
  EXPECT_NEAR(go.predicted_gain, 64 * 1.48 / (48 * 1.64) - 1, 1e-3);
  // A lower threshold switches from 60 too.
  o.switch_threshold = 0.02;
  EXPECT_TRUE(BatchSizeController(o).Recommend(1, Linear(1.0, 0.01), kNoisy, 60, 0).switched);
}

TEST(BatchSize, OutOfMemoryLowersTheCap) {
  BatchSizeOptions o;
  o.max_local_batch = 64;
  o.max_accum_steps = 0;
  BatchSizeController c(o);
  EXPECT_EQ(c.Recommend(1, Linear(1.0, 0.01), kNoisy, 0, 0).local_bsz, 64);
  c.ReportOutOfMemory(64);
  EXPECT_EQ(c.max_local_batch(), 57);  // floor(64 * 0.9)
  auto d = c.Recommend(1, Linear(1.0, 0.01), kNoisy, 64, 0);
  EXPECT_TRUE(d.switched);
  EXPECT_TRUE(d.forced);  // 64 is over the cap now, whatever the gain
  EXPECT_EQ(d.local_bsz, 57);
  c.ReportOutOfMemory(100);  // an OOM above the cap does not raise it
  EXPECT_EQ(c.max_local_batch(), 57);
  c.ReportOutOfMemory(5);  // b - 1 when backoff rounds to b
  EXPECT_EQ(c.max_local_batch(), 4);
  c.ReportOutOfMemory(1);
  EXPECT_EQ(c.max_local_batch(), 1);  // never below min_local_batch
}

TEST(BatchSize, EfficiencyLimitsTheBatch) {
  // Throughput saturates slowly; with little gradient noise (r = 1) large batches waste samples,
  // with much noise (r = 1e4) they do not.
  BatchSizeOptions o;
  o.max_local_batch = 512;
  o.max_accum_steps = 0;
  BatchSizeController c(o);
  auto low = c.Recommend(4, Linear(0.1, 0.001), NoiseState{1.0, 1.0, 32}, 0, 0);
  auto high = c.Recommend(4, Linear(0.1, 0.001), NoiseState{1.0, 1e4, 32}, 0, 0);
  EXPECT_LT(low.global_batch, high.global_batch);
  EXPECT_EQ(high.local_bsz, 512);
  EXPECT_LT(low.efficiency, 1.0);
  // Goodput is throughput x efficiency.
  EXPECT_NEAR(low.goodput, low.throughput * low.efficiency, 1e-9 * low.goodput);
  // The optimum: no neighbouring local batch has a higher goodput.
  auto goodput = [&](int b) {
    const double B = 4.0 * b;
    return B / (0.1 + 0.001 * b) * Efficiency(NoiseState{1.0, 1.0, 32}, B);
  };
  EXPECT_GE(low.goodput, goodput(low.local_bsz - 1) * (1 - 1e-12));
  EXPECT_GE(low.goodput, goodput(low.local_bsz + 1) * (1 - 1e-12));
}

TEST(BatchSize, AccumulatesWhenTheCapCannotReachTheMinimumBatch) {
  BatchSizeOptions o;
  o.max_local_batch = 64;
  o.min_global_batch = 256;
  BatchSizeController c(o);
  auto d = c.Recommend(1, Linear(0.01, 0.001), NoiseState{1.0, 10.0, 256}, 0, 0);
  EXPECT_EQ(d.local_bsz, 64);
  EXPECT_EQ(d.accum_steps, 3);
  EXPECT_EQ(d.global_batch, 256);
  // World size grows: no accumulation needed any more.
  auto d4 = c.Recommend(4, Linear(0.01, 0.001), NoiseState{1.0, 10.0, 256}, 64, 3);
  EXPECT_EQ(d4.accum_steps, 0);
  EXPECT_TRUE(d4.switched);
  EXPECT_THROW(c.Recommend(0, Linear(1, 1), kNoisy, 0, 0), std::invalid_argument);
}

TEST(BatchSize, UsesTheDriftModel) {
  // With a fitted drift at late progress the noise scale is larger than at B0: bigger batches pay.
  std::vector<NoiseObservation> obs;
  for (double p = 50; p <= 1000; p += 50) {
    obs.push_back({32, p, 0, 1.0, 2.0});            // r = 2 at B0
    obs.push_back({64, p, 0, 1.0, 2.0 + p / 100});  // grows with the batch as training goes on
  }
  EfficiencyModel m = FitEfficiency(obs);
  BatchSizeOptions o;
  o.max_local_batch = 256;
  o.max_accum_steps = 0;
  BatchSizeController c(o);
  auto early = c.Recommend(1, Linear(0.05, 0.001), m, 50, 0, 0);
  auto late = c.Recommend(1, Linear(0.05, 0.001), m, 1000, 0, 0);
  EXPECT_LT(early.global_batch, late.global_batch);
}

TEST(BatchSize, WithTheFittedThroughputAndEfficiencyModelsOfARealJob) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  // cifar10 (ResNet-18) on T4s: throughput fitted to Pollux's placements, efficiency to the
  // validation traces at 128 and 256.
  const std::string dir = std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/cifar10/";
  ThroughputModel tm = FitThroughput(ReadTraces({dir + "placements.csv"}));
  auto obs = ReadValidationTrace(dir + "validation-128.csv", 128);
  auto more = ReadValidationTrace(dir + "validation-256.csv", 256);
  obs.insert(obs.end(), more.begin(), more.end());
  EfficiencyModel em = FitEfficiency(obs);
  BatchSizeOptions o;
  o.max_local_batch = 256;
  BatchSizeController c(o);
  auto fn = StepTimeFromThroughput(tm, 2, 8, 4);
  auto early = c.Recommend(8, fn, em, 1000, 16, 0);
  auto late = c.Recommend(8, fn, em, 38000, 16, 0);
  const BatchSizeDecision ds[] = {early, late};
  const double ps[] = {1000, 38000};
  for (int i = 0; i < 2; ++i) {
    const BatchSizeDecision& d = ds[i];
    ConfigKey k;
    k.num_nodes = 2;
    k.num_replicas = 8;
    k.local_bsz = d.local_bsz;
    k.accum_steps = d.accum_steps;
    EXPECT_DOUBLE_EQ(d.step_time, tm.Predict(k, 4).step_time);
    EXPECT_NEAR(d.efficiency, em.EfficiencyAt(static_cast<double>(d.global_batch), ps[i]), 1e-12);
    EXPECT_GE(d.local_bsz, 16);  // B >= B0 = 128 on 8 workers
    EXPECT_LE(d.local_bsz, 256);
  }
  // The noise scale grows as training goes on: the best batch does not shrink.
  EXPECT_LE(early.global_batch, late.global_batch);
  std::cout << "early: b=" << early.local_bsz << " B=" << early.global_batch
            << " eff=" << early.efficiency << "; late: b=" << late.local_bsz
            << " B=" << late.global_batch << " eff=" << late.efficiency << "\n";
}

}  // namespace
}  // namespace cloudtune::estimator
