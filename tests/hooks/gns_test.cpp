// The gradient noise scale estimator against ground truth on a synthetic least-squares problem.
#include "hooks/gns.h"

#include <gtest/gtest.h>

#include <cmath>
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
  explicit Problem(int n = 4096, int d = 16, unsigned seed = 7) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> N(0, 1);
    Vec w_true(d), w(d);
    for (int j = 0; j < d; ++j) {
      w_true[j] = N(rng);
      w[j] = w_true[j] + 0.5;  // away from the optimum: a real mean gradient
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

// Runs `steps` optimizer steps with `count` micro-batch gradients of b samples each.
GnsState Simulate(const Problem& p, int count, int b, int steps, double ema) {
  std::mt19937_64 rng(11);
  GnsEstimator est(GnsOptions{ema, 0});
  for (int t = 0; t < steps; ++t) {
    Vec avg(p.grads[0].size(), 0);
    double local = 0;
    for (int k = 0; k < count; ++k) {
      Vec g = p.MicroBatch(rng, b);
      local += Sqr(g) / count;
      for (size_t j = 0; j < avg.size(); ++j) avg[j] += g[j] / count;
    }
    EXPECT_TRUE(est.Update({local, Sqr(avg), count, static_cast<double>(b), false}));
  }
  return est.State();
}

TEST(GnsOptions, DefaultsAreValid) {
  std::string err;
  EXPECT_TRUE(GnsOptions{}.IsValid(&err)) << err;
  EXPECT_FALSE((GnsOptions{1.0, 0}.IsValid(&err)));
  EXPECT_NE(err.find("ema"), std::string::npos);
}

TEST(Gns, FourReplicasMatchGroundTruth) {
  Problem p;
  ASSERT_GT(p.true_sqr, 0);
  const int b = 32;
  GnsState s = Simulate(p, /*count=*/4, b, 3000, 0.995);
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
  GnsState s = Simulate(p, /*count=*/2, b, 3000, 0.995);
  ASSERT_TRUE(s.valid);
  EXPECT_NEAR(s.grad_sqr, p.true_sqr, 0.10 * p.true_sqr);
  EXPECT_NEAR(s.grad_var * s.base_batch, p.true_var, 0.10 * p.true_var);
}

TEST(Gns, RawEstimateIsUnbiasedFormula) {
  // count = 2, g1 = (1,0), g2 = (0,1): local = 1, total = |(.5,.5)|^2 = .5.
  double g = 0, v = 0;
  ASSERT_TRUE(GnsEstimator::Estimate({1.0, 0.5, 2, 10, false}, &g, &v));
  EXPECT_DOUBLE_EQ(g, 0.0);   // (2*.5 - 1)/1
  EXPECT_DOUBLE_EQ(v, 10.0);  // (1 - .5) * 10 * 2 / 1
}

TEST(Gns, FirstStepIsBiasCorrected) {
  GnsEstimator est(GnsOptions{0.9, 8});
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
  GnsEstimator est(GnsOptions{0.5, 0});
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

TEST(Gns, NoStepsMeansNoEstimate) {
  GnsEstimator est;
  EXPECT_FALSE(est.State().valid);
  EXPECT_TRUE(std::isnan(est.State().noise_scale()));
}

}  // namespace
}  // namespace cloudtune::hooks
