#include "estimator/mixed_cluster.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "estimator/core/error.h"

namespace cloudtune::estimator {
namespace {

// The same job on two types, written out independently of the implementation (kappa = 1).
struct Truth {
  double alpha_c, beta_c;           // T_c = alpha_c + beta_c * b
  double alpha_l, beta_l;           // one machine
  double alpha_n, beta_n, delta_n;  // network
  double gamma = 2.0, omega = 0.7;
  double Compute(int b) const { return alpha_c + beta_c * b; }
  double AllReduce(int nodes, int replicas) const {
    if (replicas < 2) return 0;
    if (nodes == 1) return alpha_l + beta_l * (replicas - 2);
    const double g = double(replicas) / nodes;
    return alpha_n + beta_n * std::log(replicas / 2.0) + delta_n * (g - 1) / (nodes - 1);
  }
  // One step of `replicas` replicas on `nodes` machines whose compute takes tc.
  double StepWith(double tc, int nodes, int replicas) const {
    const double tn = AllReduce(nodes, replicas);
    if (tn <= 0) return tc;
    const double a = omega * tc;
    return tc + tn - std::pow(std::pow(a, -gamma) + std::pow(tn, -gamma), -1 / gamma);
  }
  double Step(const ConfigKey& k) const {
    return StepWith(Compute(k.local_bsz), k.num_nodes, k.num_replicas);
  }
};

const Truth kSlow{0.02, 6e-4, 0.004, 0.002, 0.05, 0.02, 0.03};
const Truth kFast{0.015, 2e-4, 0.003, 0.0015, 0.06, 0.025, 0.035};  // 3x the GPU, slower network

std::vector<Measurement> Measure(const Truth& t, const std::string& type, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.02);
  std::vector<Measurement> out;
  for (int nodes : {1, 2, 3, 4})
    for (int gpn : {1, 2, 4})
      for (int b : {8, 16, 32, 64, 128, 256}) {
        Measurement m;
        m.key.num_nodes = nodes;
        m.key.num_replicas = nodes * gpn;
        m.key.local_bsz = b;
        m.key.instance_type = type;
        m.step_time = t.Step(m.key) * std::exp(noise(rng));
        m.sync_time = std::max(0.0, t.Step(m.key) - t.Compute(b)) * std::exp(noise(rng));
        m.sync_time = std::min(m.sync_time, 0.9 * m.step_time);
        m.rows = 1;
        out.push_back(m);
      }
  return out;
}

CrossTypeThroughputModel TwoTypes() {
  auto data = Measure(kSlow, "slow", 1);
  const auto fast = Measure(kFast, "fast", 2);
  data.insert(data.end(), fast.begin(), fast.end());
  return FitCrossType(data);
}

// Brute force: every split of the global batch over the two parts, the true step of each (the
// slowest replica's compute, then the all-reduce of the whole ring on the slower of the links).
double BestTrueStep(int r_slow, int r_fast, int nodes, long long batch, int* best_slow) {
  double best = 1e300;
  for (int bs = 1; bs * r_slow < batch; ++bs) {
    const long long rest = batch - static_cast<long long>(bs) * r_slow;
    if (rest % r_fast) continue;
    const int bf = static_cast<int>(rest / r_fast);
    const double tc = std::max(kSlow.Compute(bs), kFast.Compute(bf));
    const double step = std::max(kSlow.StepWith(tc, nodes, r_slow + r_fast),
                                 kFast.StepWith(tc, nodes, r_slow + r_fast));
    if (step < best) best = step, *best_slow = bs;
  }
  return best;
}

TEST(MixedCluster, BalancedBatchesEqualiseComputeAndMatchBruteForce) {
  const auto m = TwoTypes();
  const std::vector<ClusterPart> parts = {{"slow", 2, 4}, {"fast", 1, 4}};
  const long long batch = 3072;  // compute-bound: where balancing matters
  const MixedStepPrediction p = PredictMixed(m, parts, batch);
  ASSERT_EQ(p.local_bsz.size(), 2u);
  EXPECT_EQ(p.global_batch, batch);
  EXPECT_EQ(8LL * p.local_bsz[0] + 4LL * p.local_bsz[1], batch);
  // The faster GPU gets the larger share, and the true compute times are within 10 %.
  EXPECT_GT(p.local_bsz[1], 2 * p.local_bsz[0]);
  const double tc_slow = kSlow.Compute(p.local_bsz[0]), tc_fast = kFast.Compute(p.local_bsz[1]);
  EXPECT_NEAR(tc_slow / tc_fast, 1.0, 0.10);
  EXPECT_LT(p.imbalance, 1.10);
  // The predicted step matches the brute-force optimum, and the chosen split is near-optimal.
  int best_slow = 0;
  const double best = BestTrueStep(8, 4, 3, batch, &best_slow);
  EXPECT_NEAR(p.step_time / best, 1.0, 0.06) << "best split: slow " << best_slow;
  const double chosen = std::max(kSlow.StepWith(std::max(tc_slow, tc_fast), 3, 12),
                                 kFast.StepWith(std::max(tc_slow, tc_fast), 3, 12));
  EXPECT_LT(chosen / best, 1.03);
  EXPECT_GT(p.log_sigma, 0);
  // An even split (what a single-type job would do) is clearly slower.
  const double even = std::max(kSlow.StepWith(kSlow.Compute(256), 3, 12),
                               kFast.StepWith(kSlow.Compute(256), 3, 12));
  EXPECT_GT(even, 1.1 * best);
}

TEST(MixedCluster, GlobalBatchThatIntegersCannotHitExactlyIsTheNextOneUp) {
  const auto m = TwoTypes();
  const MixedStepPrediction p = PredictMixed(m, {{"slow", 1, 4}, {"fast", 1, 4}}, 1001);
  EXPECT_GE(p.global_batch, 1001);
  EXPECT_LT(p.global_batch, 1001 + 4);
  EXPECT_EQ(p.global_batch, 4LL * p.local_bsz[0] + 4LL * p.local_bsz[1]);
}

TEST(MixedCluster, OnePartIsTheSingleTypePrediction) {
  const auto m = TwoTypes();
  const MixedStepPrediction p = PredictMixed(m, {{"fast", 2, 4}}, 512);
  ASSERT_EQ(p.local_bsz.size(), 1u);
  EXPECT_EQ(p.local_bsz[0], 64);
  ConfigKey k;
  k.num_nodes = 2;
  k.num_replicas = 8;
  k.local_bsz = 64;
  k.instance_type = "fast";
  EXPECT_NEAR(p.step_time, m.Predict(k).step_time, 1e-12);
}

TEST(MixedCluster, BadInputIsNamed) {
  const auto m = TwoTypes();
  EXPECT_THROW(PredictMixed(m, {}, 64), InputError);
  try {
    PredictMixed(m, {{"slow", 1, 4}, {"fast", 1, 4}}, 7);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "mixed cluster: global batch 7 is smaller than its 8 replicas (each needs a sample)");
  }
  try {
    PredictMixed(m, {{"slow", 0, 4}}, 64);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "mixed cluster: part 0 (slow): nodes and gpus_per_node must be >= 1");
  }
  EXPECT_THROW(PredictMixed(m, {{"nowhere", 1, 1}}, 64), InputError);  // no catalog entry
}

}  // namespace
}  // namespace cloudtune::estimator
