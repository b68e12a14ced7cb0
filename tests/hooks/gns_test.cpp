// The gradient noise scale estimator against ground truth on a synthetic least-squares problem.
#include "hooks/gns.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>
#include <vector>

namespace cloudtune::hooks {
namespace {

using Vec = std::vector<double>;

// A fixed population of per-sample gradients g_i = a_i (a_i·w − y_i) of 0.5 (a_i·w − y_i)^2 at a
// fixed w; |G|^2 and the per-sample tr(Σ₁) are computed by brute force over them.
struct Problem {
  std::vector<Vec> grads;
  double true_sqr = 0, true_var = 0;  // |G|^2, tr(Σ₁)
  explicit Problem(int n = 4096, int d = 16, unsigned seed = 7, double offset = 0.5) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> N(0, 1);
    Vec w_true(d), w(d);
    for (int j = 0; j < d; ++j) {
      w_true[j] = N(rng);
      w[j] = w_true[j] + offset;  // away from the optimum: a real mean gradient
    }
    Vec mean(d, 0);
    for (int i = 0; i < n; ++i) {
      Vec a(d);
      double r = 0, y = 0;
      for (int j = 0; j < d; ++j) a[j] = N(rng);
      for (int j = 0; j < d; ++j) y += a[j] * w_true[j];
      y += 2.0 * N(rng);
      for (int j = 0; j < d; ++j) r += a[j] * w[j];
      r -= y;
      Vec g(d);
      for (int j = 0; j < d; ++j) g[j] = a[j] * r, mean[j] += g[j] / n;
      grads.push_back(g);
    }
    for (double m : mean) true_sqr += m * m;
    for (const Vec& g : grads)
      for (int j = 0; j < d; ++j) true_var += (g[j] - mean[j]) * (g[j] - mean[j]) / n;
  }
  // Mean gradient of b samples drawn with replacement.
  Vec MicroBatch(std::mt19937_64& rng, int b) const {
    std::uniform_int_distribution<size_t> pick(0, grads.size() - 1);
    Vec m(grads[0].size(), 0);
    for (int k = 0; k < b; ++k) {
      const Vec& g = grads[pick(rng)];
      for (size_t j = 0; j < m.size(); ++j) m[j] += g[j] / b;
    }
    return m;
  }
};

double Sqr(const Vec& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

// One step's sample: `count` micro-batch gradients of b samples each.
GnsSample Step(const Problem& p, std::mt19937_64& rng, int count, int b) {
  Vec avg(p.grads[0].size(), 0);
  double local = 0;
  for (int k = 0; k < count; ++k) {
    Vec g = p.MicroBatch(rng, b);
    local += Sqr(g) / count;
    for (size_t j = 0; j < avg.size(); ++j) avg[j] += g[j] / count;
  }
  return {local, Sqr(avg), count, static_cast<double>(b), false};
}

// Runs `steps` optimizer steps with `count` micro-batch gradients of b samples each.
GnsState Simulate(const Problem& p, int count, int b, int steps, GnsOptions o = {}) {
  std::mt19937_64 rng(11);
  GnsEstimator est(o);
  for (int t = 0; t < steps; ++t) EXPECT_TRUE(est.Update(Step(p, rng, count, b)));
  return est.State();
}

TEST(GnsOptions, DefaultsAreValid) {
  std::string err;
  EXPECT_TRUE(GnsOptions{}.IsValid(&err)) << err;
  GnsOptions o;
  o.target_error = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "GnsOptions::target_error must be > 0, got 0.000000");
  o = {};
  o.max_window = 4;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_NE(err.find("max_window must be >= min_window"), std::string::npos) << err;
}

TEST(Gns, FourReplicasMatchGroundTruth) {
  Problem p;
  ASSERT_GT(p.true_sqr, 0);
  const int b = 32;
  GnsState s = Simulate(p, /*count=*/4, b, 3000);
  ASSERT_TRUE(s.valid);
  EXPECT_FALSE(s.biased);
  EXPECT_EQ(s.base_batch, 4 * b);
  EXPECT_NEAR(s.grad_sqr, p.true_sqr, 0.10 * p.true_sqr);
  EXPECT_NEAR(s.grad_var * s.base_batch, p.true_var, 0.10 * p.true_var);
  EXPECT_NEAR(s.noise_scale(), p.true_var / p.true_sqr, 0.2 * p.true_var / p.true_sqr);
}

TEST(Gns, OneReplicaTwoAccumulationStepsMatchGroundTruth) {
  Problem p;
  const int b = 32;
  GnsState s = Simulate(p, /*count=*/2, b, 3000);
  ASSERT_TRUE(s.valid);
  EXPECT_NEAR(s.grad_sqr, p.true_sqr, 0.10 * p.true_sqr);
  EXPECT_NEAR(s.grad_var * s.base_batch, p.true_var, 0.10 * p.true_var);
}

// Two replicas with local batches 48 and 80 (a mixed cluster balancing its step times), their
// gradients combined weighted by samples (the whole batch's gradient) or equally (a plain
// all-reduce average): the unequal-batch estimates match the ground truth within 10%, while the
// equal-batch formula at the mean batch (64) overstates tr(Σ₁) by the ratio of (1/48+1/80)/2-1/128
// to 1/64-1/128, 13%, for the sample-weighted combination.
TEST(Gns, UnequalLocalBatchesMatchGroundTruth) {
  Problem p;
  const std::vector<double> batches{48, 80};
  for (bool sample_weighted : {true, false}) {
    std::mt19937_64 rng(13);
    GnsEstimator est, naive;
    for (int t = 0; t < 4000; ++t) {
      const Vec g1 = p.MicroBatch(rng, 48), g2 = p.MicroBatch(rng, 80);
      const double w1 = sample_weighted ? 48.0 / 128 : 0.5;
      Vec avg(g1.size());
      for (size_t j = 0; j < avg.size(); ++j) avg[j] = w1 * g1[j] + (1 - w1) * g2[j];
      GnsSample s{(Sqr(g1) + Sqr(g2)) / 2, Sqr(avg), 2, 64, false};
      ASSERT_TRUE(naive.Update(s));
      SetUnequalBatches(batches, sample_weighted, &s);
      EXPECT_DOUBLE_EQ(s.micro_batch, 64);
      ASSERT_TRUE(est.Update(s));
    }
    const GnsState st = est.State(), nv = naive.State();
    EXPECT_EQ(st.base_batch, 128);
    EXPECT_NEAR(st.grad_sqr, p.true_sqr, 0.10 * p.true_sqr) << sample_weighted;
    EXPECT_NEAR(st.grad_var * st.base_batch, p.true_var, 0.10 * p.true_var) << sample_weighted;
    std::cout << (sample_weighted ? "sample-weighted" : "equal average") << ": |G|^2 / truth "
              << st.grad_sqr / p.true_sqr << ", tr(Sigma) / truth "
              << st.grad_var * st.base_batch / p.true_var << ", equal-batch formula "
              << nv.grad_var * nv.base_batch / p.true_var << "\n";
    if (sample_weighted) {  // same steps: the two formulas differ by exactly that factor
      EXPECT_NEAR(nv.grad_var / st.grad_var, ((1.0 / 48 + 1.0 / 80) / 2 - 1.0 / 128) / (1.0 / 128),
                  0.005);
    }
  }
  // Unusable factors are refused, not folded in.
  GnsSample bad{1.0, 0.5, 2, 64, false};
  bad.mean_inv_batch = 0.01;
  bad.combined_inv_batch = 0.02;  // the combination cannot be noisier than its parts
  double g = 0, v = 0;
  EXPECT_FALSE(GnsEstimator::Estimate(bad, &g, &v));
}

TEST(Gns, RawEstimateIsUnbiasedFormula) {
  // count = 2, g1 = (1,0), g2 = (0,1): local = 1, total = |(.5,.5)|^2 = .5.
  double g = 0, v = 0;
  ASSERT_TRUE(GnsEstimator::Estimate({1.0, 0.5, 2, 10, false}, &g, &v));
  EXPECT_DOUBLE_EQ(g, 0.0);   // (2*.5 - 1)/1
  EXPECT_DOUBLE_EQ(v, 10.0);  // (1 - .5) * 10 * 2 / 1
}

TEST(Gns, FirstStepIsBiasCorrected) {
  GnsOptions o;
  o.base_batch = 8;
  GnsEstimator est(o);
  ASSERT_TRUE(est.Update({3.0, 2.0, 4, 2, false}));
  double g = 0, v = 0;
  GnsEstimator::Estimate({3.0, 2.0, 4, 2, false}, &g, &v);
  GnsState s = est.State();
  EXPECT_DOUBLE_EQ(s.grad_sqr, g);  // not 0.1 * g: the EMA's start-up bias is removed
  EXPECT_DOUBLE_EQ(s.grad_var, v / 8);
  EXPECT_EQ(s.base_batch, 8);
}

TEST(Gns, ConsecutiveStepsModeIsFlaggedBiased) {
  GnsEstimator est;
  ASSERT_TRUE(est.Update({2.0, 1.5, 2, 16, /*biased=*/true}));
  EXPECT_TRUE(est.State().biased);
  EXPECT_EQ(est.State().base_batch, 16);  // one replica's batch, not 2x
  ASSERT_TRUE(est.Update({2.0, 1.5, 4, 16, false}));
  EXPECT_FALSE(est.State().biased);
}

TEST(Gns, NonFiniteStepsAreSkippedAndCounted) {
  GnsEstimator est;
  ASSERT_TRUE(est.Update({3.0, 2.0, 4, 2, false}));
  const GnsState before = est.State();
  EXPECT_FALSE(est.Update({std::nan(""), 2.0, 4, 2, false}));
  EXPECT_FALSE(est.Update({3.0, INFINITY, 4, 2, false}));
  EXPECT_FALSE(est.Update({3.0, 2.0, 1, 2, false}));  // one gradient: no variance information
  const GnsState after = est.State();
  EXPECT_EQ(after.skipped, 3);
  EXPECT_EQ(after.steps, 1);
  EXPECT_DOUBLE_EQ(after.grad_sqr, before.grad_sqr);
  EXPECT_DOUBLE_EQ(after.grad_var, before.grad_var);
  EXPECT_TRUE(std::isfinite(after.noise_scale()));
}

// Two workers (count 2), the example's case: one step's |G|^2 estimate scatters by many times
// its mean. The window grows until the smoothed values reach the target error, so the noise scale
// of consecutive records (every 50 steps) varies by <= 15 % (CV), and the reported log_sigma says
// how uncertain it is.
TEST(Gns, WindowFollowsTheEstimatorsVarianceAndRecordsDoNotFlip) {
  Problem p;
  std::mt19937_64 rng(3);
  GnsEstimator est;
  std::vector<double> phi;
  for (int t = 1; t <= 30000; ++t) {
    ASSERT_TRUE(est.Update(Step(p, rng, 2, 32)));
    if (t % 50 == 0 && t > 5000) phi.push_back(est.State().noise_scale());
  }
  const GnsState s = est.State();
  EXPECT_GT(s.window, 50);  // far longer than 20 steps (the EMA of decay 0.95 it replaces)
  EXPECT_LE(s.window, GnsOptions{}.max_window + 1e-9);
  EXPECT_GT(s.log_sigma, 0);
  EXPECT_LT(s.log_sigma, 0.2);
  double sum = 0, sum2 = 0;
  for (size_t i = 1; i < phi.size(); ++i) {
    const double d = phi[i] / phi[i - 1] - 1;
    sum += d, sum2 += d * d;
  }
  const double n = phi.size() - 1, cv = std::sqrt(sum2 / n - (sum / n) * (sum / n));
  EXPECT_LE(cv, 0.15);
  const double truth = p.true_var / p.true_sqr;
  EXPECT_NEAR(s.noise_scale(), truth, 0.25 * truth);
  // Less noise per step (8 gradients of 128 samples): a shorter window suffices.
  GnsEstimator quiet;
  for (int t = 0; t < 5000; ++t) ASSERT_TRUE(quiet.Update(Step(p, rng, 8, 128)));
  EXPECT_LT(quiet.State().window, s.window);
}

// Feeds per-step values directly: with count 2 and micro_batch 1, |G|^2 = 2·avg − local and
// tr(Σ₁) = 2·(local − avg), so local = G + T and avg = G + T/2.
GnsSample Values(double g, double t) { return {g + t, g + t / 2, 2, 1.0, false}; }

// The effective-sample-size rule on synthetic i.i.d. per-step values (|G|^2 scattering by 100 %
// of its mean, tr(Σ) by 50 %): the window settles at var/(target²·mean²) = 400 steps, the spread
// of the smoothed |G|^2 between independent times is the target (5 %), and the reported
// log_sigma says so.
TEST(Gns, EffectiveSampleSizeBringsTheSpreadToTheTarget) {
  std::mt19937_64 rng(17);
  std::normal_distribution<double> N(0, 1);
  GnsEstimator est;
  std::vector<double> sqr, log_phi, sigma;
  for (int t = 1; t <= 300000; ++t) {
    ASSERT_TRUE(est.Update(Values(2.0 * (1 + N(rng)), 50.0 * (1 + 0.5 * N(rng)))));
    if (t % 3000 == 0) {  // far more than a window apart: independent
      const GnsState st = est.State();
      sqr.push_back(st.grad_sqr);
      log_phi.push_back(std::log(st.noise_scale()));
      sigma.push_back(st.log_sigma);
    }
  }
  EXPECT_NEAR(est.State().window, 400, 60);
  auto spread = [](const std::vector<double>& v, bool relative) {
    double m = 0, m2 = 0;
    for (double x : v) m += x / v.size();
    for (double x : v) m2 += (x - m) * (x - m) / (v.size() - 1);
    return std::sqrt(m2) / (relative ? m : 1.0);
  };
  EXPECT_NEAR(spread(sqr, true), 0.05, 0.012);  // 100 samples: the spread's own error is ~7 %
  double mean_sigma = 0;
  for (double x : sigma) mean_sigma += x / sigma.size();
  // Expected sqrt(0.05² + 0.025²) = 0.056; the observed spread of log(φ) agrees.
  EXPECT_NEAR(mean_sigma, 0.056, 0.008);
  EXPECT_NEAR(spread(log_phi, false) / mean_sigma, 1.0, 0.25);
  std::cout << "window " << est.State().window << ", spread of |G|^2 " << spread(sqr, true)
            << ", log_sigma " << mean_sigma << ", spread of log(phi) " << spread(log_phi, false)
            << "\n";
}

// A step change in the true gradient (the run moves to other weights): the smoothed |G|^2 follows
// within 2.5 windows (the window in force before the change; an exponential average reaches 90 %
// of a step in 1.15 windows, the rest is the new window's sampling noise).
TEST(Gns, StepChangeIsTrackedWithinTheStatedSteps) {
  const Problem before, after(4096, 16, 7, 1.5);
  ASSERT_GT(after.true_sqr, 4 * before.true_sqr);
  std::mt19937_64 rng(5);
  GnsEstimator est;
  for (int t = 0; t < 8000; ++t) ASSERT_TRUE(est.Update(Step(before, rng, 4, 32)));
  ASSERT_NEAR(est.State().grad_sqr, before.true_sqr, 0.2 * before.true_sqr);
  const double window = est.State().window;
  int tracked_at = -1;
  for (int t = 1; t <= 20000 && tracked_at < 0; ++t) {
    ASSERT_TRUE(est.Update(Step(after, rng, 4, 32)));
    if (std::abs(est.State().grad_sqr / after.true_sqr - 1) < 0.2) tracked_at = t;
  }
  ASSERT_GT(tracked_at, 0);
  EXPECT_LE(tracked_at, 2.5 * window) << "window " << window;
  // ... and stays there.
  for (int t = 0; t < 3000; ++t) ASSERT_TRUE(est.Update(Step(after, rng, 4, 32)));
  EXPECT_NEAR(est.State().grad_sqr, after.true_sqr, 0.2 * after.true_sqr);
}

TEST(Gns, NoStepsMeansNoEstimate) {
  GnsEstimator est;
  EXPECT_FALSE(est.State().valid);
  EXPECT_TRUE(std::isnan(est.State().noise_scale()));
}

}  // namespace
}  // namespace cloudtune::hooks
