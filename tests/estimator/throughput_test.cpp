#include "estimator/throughput.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "estimator/core/error.h"

namespace cloudtune::estimator {
namespace {

// Ground truth written out independently of the implementation.
struct Truth {
  double alpha_c = 0.02, beta_c_per_sample = 5e-4;       // T_c = alpha_c + beta_c * b (kappa = 1)
  double alpha_l = 0.004, beta_l = 0.002;                // one machine
  double alpha_n = 0.05, beta_n = 0.02, delta_n = 0.03;  // network
  double gamma = 2.0, omega = 0.7;  // overlap: T = tc + tn - softmin_gamma(omega * tc, tn)

  double Compute(int b) const { return alpha_c + beta_c_per_sample * b; }
  double Step(const ConfigKey& k) const {
    const double tc = Compute(k.local_bsz);
    double t = tc;
    if (k.num_replicas >= 2) {
      double tn;
      if (k.num_nodes == 1) {
        tn = alpha_l + beta_l * (k.num_replicas - 2);
      } else {
        const double g = double(k.num_replicas) / k.num_nodes;
        tn = alpha_n + beta_n * std::log(k.num_replicas / 2.0) +
             delta_n * (g - 1) / (k.num_nodes - 1);
      }
      const double a = omega * tc;
      t = tc + tn - std::pow(std::pow(a, -gamma) + std::pow(tn, -gamma), -1 / gamma);
    }
    return k.accum_steps * tc + t;
  }
};

Measurement Measure(const Truth& truth, const ConfigKey& k, std::mt19937* rng, double noise) {
  std::normal_distribution<double> n(0.0, noise);
  Measurement m;
  m.key = k;
  const double tc = truth.Compute(k.local_bsz) * (k.accum_steps + 1);
  m.step_time = truth.Step(k) * std::exp(n(*rng));
  m.sync_time = std::max(0.0, truth.Step(k) - tc) * std::exp(n(*rng));
  m.sync_time = std::min(m.sync_time, 0.95 * m.step_time);
  m.rows = 1;
  return m;
}

ConfigKey Key(int nodes, int replicas, int bsz, int accum = 0) {
  ConfigKey k;
  k.num_nodes = nodes;
  k.num_replicas = replicas;
  k.local_bsz = bsz;
  k.accum_steps = accum;
  return k;
}

// A grid like the Pollux traces: 1-8 machines of 1-4 GPUs, 5 batch sizes.
std::vector<ConfigKey> Grid() {
  std::vector<ConfigKey> keys;
  for (int nodes : {1, 2, 3, 4, 8})
    for (int gpn : {1, 2, 3, 4})
      for (int b : {16, 32, 64, 128, 256}) keys.push_back(Key(nodes, nodes * gpn, b));
  return keys;
}

std::vector<Measurement> MeasureAll(const Truth& t, const std::vector<ConfigKey>& keys,
                                    unsigned seed, double noise) {
  std::mt19937 rng(seed);
  std::vector<Measurement> out;
  for (const auto& k : keys) out.push_back(Measure(t, k, &rng, noise));
  return out;
}

TEST(ThroughputOptions, DefaultsAreValid) {
  std::string err = "untouched";
  EXPECT_TRUE(ThroughputFitOptions{}.IsValid(&err));
}

TEST(ThroughputOptions, InvalidValuesAreNamed) {
  std::string err;
  ThroughputFitOptions o;
  o.obs_sigma = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "obs_sigma must be > 0");
  o = {};
  o.identified_ratio = 1.5;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "identified_ratio must be in (0, 1)");
  o = {};
  o.max_iterations = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "max_iterations must be >= 1");
  o = {};
  o.growth_sigma = -0.1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "growth_sigma must be >= 0");
  o = {};
  o.cost_tolerance = -0.1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "cost_tolerance must be >= 0");
  EXPECT_THROW(FitThroughput(MeasureAll(Truth{}, Grid(), 1, 0.01), o), InputError);
}

TEST(ThroughputFit, EmptyInputThrows) { EXPECT_THROW(FitThroughput({}), InputError); }

TEST(ThroughputFit, RecoversKnownParameters) {
  const Truth t;
  const auto data = MeasureAll(t, Grid(), 7, 0.02);
  const auto m = FitThroughput(data);
  EXPECT_EQ(m.stats().configurations, static_cast<int>(data.size()));
  EXPECT_LT(m.stats().mape_step, 0.03);
  EXPECT_NEAR(m.param(kAlphaC), t.alpha_c, 0.25 * t.alpha_c);
  EXPECT_NEAR(m.param(kBetaC), t.beta_c_per_sample, 0.15 * t.beta_c_per_sample);
  EXPECT_NEAR(m.param(kKappa), 1.0, 0.1);
  EXPECT_NEAR(m.param(kAlphaN), t.alpha_n, 0.3 * t.alpha_n);
  EXPECT_NEAR(m.param(kGamma), t.gamma, 0.6);
  EXPECT_NEAR(m.param(kOmega), t.omega, 0.15);
  for (int i : {kAlphaC, kBetaC, kAlphaN, kGamma}) EXPECT_TRUE(m.identified(i)) << i;
  // Unseen configurations (6 machines; batch sizes between the measured ones) within 5%.
  for (const auto& k : {Key(6, 12, 48), Key(6, 24, 200), Key(2, 6, 100), Key(1, 3, 90)}) {
    const auto p = m.Predict(k);
    EXPECT_NEAR(p.step_time / t.Step(k), 1.0, 0.05)
        << k.num_nodes << "," << k.num_replicas << "," << k.local_bsz;
    EXPECT_NEAR(p.throughput, k.global_batch() / p.step_time, 1e-9);
    EXPECT_GE(p.sync_time, 0);
    EXPECT_NEAR(p.compute_time / t.Compute(k.local_bsz), 1.0, 0.05);
  }
}

TEST(ThroughputFit, ComputeEffectOfOnePlacement) {
  // One placement's machines compute 10% slower (e.g. a slow data loader): its compute effect
  // takes it, the others stay near 0, and an unseen placement gets none.
  const Truth t;
  auto data = MeasureAll(t, Grid(), 11, 0.01);
  for (auto& d : data)
    if (d.key.num_nodes == 3 && d.key.num_replicas == 9) {
      const double tc = t.Compute(d.key.local_bsz);
      d.step_time += 0.1 * tc;
    }
  ThroughputFitOptions options;
  options.obs_sigma = 0.01;  // the noise of the data: the effect rests on the data, not the prior
  const auto m = FitThroughput(data, options);
  EXPECT_GT(m.compute_effect(3, 9), 0.04);
  EXPECT_LT(std::abs(m.compute_effect(2, 4)), 0.02);
  // Without the effect (a prior that pins it to 0) that placement's step times are worse.
  ThroughputFitOptions pinned = options;
  pinned.compute_effect_sigma = 1e-6;
  const auto m0 = FitThroughput(data, pinned);
  EXPECT_NEAR(m0.compute_effect(3, 9), 0.0, 1e-4);
  double worst = 0, worst0 = 0;
  for (const auto& d : data)
    if (d.key.num_nodes == 3 && d.key.num_replicas == 9) {
      worst = std::max(worst, std::abs(m.Predict(d.key).step_time / d.step_time - 1));
      worst0 = std::max(worst0, std::abs(m0.Predict(d.key).step_time / d.step_time - 1));
    }
  EXPECT_LT(worst, 0.06);
  EXPECT_LT(worst, 0.75 * worst0);
  EXPECT_EQ(m.compute_effect(5, 10), 0.0);
  EXPECT_EQ(m.compute_placements().size(), 20u);  // every (nodes, replicas) of the grid
}

TEST(ThroughputFit, AccumulationAddsComputeSteps) {
  const auto m = FitThroughput(MeasureAll(Truth{}, Grid(), 3, 0.02));
  const auto p0 = m.Predict(Key(4, 8, 64, 0));
  const auto p3 = m.Predict(Key(4, 8, 64, 3));
  EXPECT_NEAR(p3.step_time - p0.step_time, 3 * p0.compute_time, 1e-12);
  EXPECT_NEAR(p3.throughput, 4.0 * 8 * 64 / p3.step_time, 1e-9);
}

TEST(ThroughputFit, RowsOfOneConfigurationWithSeveralAccumulationSteps) {
  // Each configuration measured with 0, 1 and 3 accumulation steps: the rows share the
  // configuration's compute and all-reduce terms in the fit (and their derivatives), and differ in
  // the accumulation's compute steps only.
  const Truth t;
  std::vector<ConfigKey> keys;
  for (const auto& k : Grid())
    for (int accum : {0, 1, 3})
      keys.push_back(Key(k.num_nodes, k.num_replicas, k.local_bsz, accum));
  const auto data = MeasureAll(t, keys, 17, 0.02);
  const auto m = FitThroughput(data);
  EXPECT_EQ(m.stats().configurations, static_cast<int>(data.size()));
  EXPECT_EQ(m.stats().termination, "CONVERGENCE");
  EXPECT_LE(m.stats().iterations, 15);
  EXPECT_LT(m.stats().mape_step, 0.03);
  EXPECT_NEAR(m.param(kAlphaC), t.alpha_c, 0.25 * t.alpha_c);
  EXPECT_NEAR(m.param(kBetaC), t.beta_c_per_sample, 0.1 * t.beta_c_per_sample);
  EXPECT_NEAR(m.param(kAlphaN), t.alpha_n, 0.3 * t.alpha_n);
  for (const auto& k : {Key(6, 12, 48, 2), Key(2, 6, 100, 1), Key(1, 3, 90, 4), Key(3, 9, 64)}) {
    EXPECT_NEAR(m.Predict(k).step_time / t.Step(k), 1.0, 0.05)
        << k.num_nodes << "," << k.num_replicas << "," << k.local_bsz << "," << k.accum_steps;
  }
}

TEST(ThroughputFit, IsDeterministic) {
  const auto data = MeasureAll(Truth{}, Grid(), 11, 0.05);
  auto a = FitThroughput(data).ToJson();
  auto b = FitThroughput(data).ToJson();
  a["fit"].erase("seconds");
  b["fit"].erase("seconds");
  EXPECT_EQ(a.dump(), b.dump());
}

TEST(ThroughputFit, CostToleranceStopsNearTheMinimum) {
  // The default cost_tolerance stops within ~0.01 of the cost that Ceres' relative tolerance alone
  // reaches, no later, and with predictions a small fraction of their uncertainty away.
  const auto data = MeasureAll(Truth{}, Grid(), 13, 0.05);
  ThroughputFitOptions strict;
  strict.cost_tolerance = 0;
  strict.function_tolerance = 1e-10;
  const auto a = FitThroughput(data), b = FitThroughput(data, strict);
  EXPECT_EQ(a.stats().termination, "CONVERGENCE");
  EXPECT_LE(a.stats().iterations, b.stats().iterations);
  EXPECT_LE(b.stats().final_cost, a.stats().final_cost);
  EXPECT_LT(a.stats().final_cost - b.stats().final_cost, 0.02);
  for (const auto& k : {Key(6, 12, 48), Key(16, 64, 256), Key(1, 4, 16)}) {
    const auto pa = a.Predict(k), pb = b.Predict(k);
    EXPECT_LT(std::abs(std::log(pa.step_time / pb.step_time)), 0.1 * pb.log_sigma);
  }
}

TEST(ThroughputFit, UncertaintyCoversHeldOutConfigurations) {
  // Fit on every other configuration, predict the rest: about 68% should fall within one
  // log_sigma and nearly all within three (loosely: 0.45-0.95 and >= 0.9).
  const Truth t;
  const auto keys = Grid();
  std::mt19937 rng(5);
  std::vector<Measurement> train, test;
  for (size_t i = 0; i < keys.size(); ++i)
    (i % 2 ? test : train).push_back(Measure(t, keys[i], &rng, 0.05));
  const auto m = FitThroughput(train);
  int in1 = 0, in3 = 0;
  for (const auto& x : test) {
    const auto p = m.Predict(x.key);
    const double z = std::abs(std::log(p.step_time / x.step_time)) / p.log_sigma;
    in1 += z <= 1;
    in3 += z <= 3;
  }
  const double f1 = double(in1) / test.size(), f3 = double(in3) / test.size();
  EXPECT_GT(f1, 0.45);
  EXPECT_LT(f1, 0.95);
  EXPECT_GE(f3, 0.9);
}

// A truth with a per-configuration scatter that no term of the form has (a shape particular to each
// configuration, as Gavel's placements out of order): the effects absorb part of it, so the fit's
// in-sample noise scale under-states what a held-out configuration errs by. The leave-one-out check
// sees it and widens the intervals. Where the form holds (measurement noise only), it leaves them.
TEST(ThroughputFit, TheLeaveOneOutCheckWidensWhatTheFormMisfits) {
  const Truth t;
  struct Result {
    double scale = 0, z2 = 0;  // means over the seeds and the held-out configurations
  };
  auto run = [&](double scatter, bool loo) {
    Result r;
    int n = 0;
    constexpr int kSeeds = 20;
    for (unsigned seed = 0; seed < kSeeds; ++seed) {
      std::mt19937 rng(seed);
      std::normal_distribution<double> z(0.0, 1.0);
      std::vector<Measurement> train, test;
      const auto keys = Grid();
      for (size_t i = 0; i < keys.size(); ++i) {
        Measurement m = Measure(t, keys[i], &rng, 0.02);
        m.step_time *= std::exp(scatter * z(rng));
        m.sync_time = 0;  // step times only: the sync time is "not measured"
        (i % 4 == seed % 4 ? test : train).push_back(m);
      }
      ThroughputFitOptions o;
      o.loo_widening = loo;
      const auto m = FitThroughput(train, o);
      r.scale += m.loo_variance_scale() / kSeeds;
      for (const auto& x : test) {
        const auto p = m.Predict(x.key);
        r.z2 += std::pow(std::log(p.step_time / x.step_time) / p.log_sigma, 2);
        ++n;
      }
    }
    r.z2 /= n;
    return r;
  };
  // Mean squared standardised held-out error: 1 when the stated variance is right.
  const Result smooth = run(0.0, true), off = run(0.2, false), on = run(0.2, true);
  EXPECT_LT(smooth.scale, 1.1);
  EXPECT_GT(smooth.z2, 0.7);
  EXPECT_LT(smooth.z2, 1.3);
  EXPECT_DOUBLE_EQ(off.scale, 1.0);
  EXPECT_GT(off.z2, 1.4) << "without the check the misfit is under-stated";  // 1.63
  EXPECT_GT(on.scale, 1.3);                                                  // 1.67
  EXPECT_GT(on.z2, 0.75);
  EXPECT_LT(on.z2, 1.3) << on.z2;  // 1.03
  // The rows' order is not the fit's: the same measurements reversed and shuffled give the same
  // factor (the fit sorts its rows by placement; each check pairs a row with its own measurement).
  std::mt19937 rng(7);
  std::vector<Measurement> rows;
  for (const auto& key : Grid()) rows.push_back(Measure(t, key, &rng, 0.02));
  std::normal_distribution<double> z(0.0, 0.2);
  for (auto& m : rows) m.step_time *= std::exp(z(rng)), m.sync_time = 0;
  const double sorted = FitThroughput(rows, {}).loo_variance_scale();
  ASSERT_GT(sorted, 1.1);
  std::reverse(rows.begin(), rows.end());
  EXPECT_NEAR(FitThroughput(rows, {}).loo_variance_scale(), sorted, 0.02 * sorted);
  std::shuffle(rows.begin(), rows.end(), rng);
  EXPECT_NEAR(FitThroughput(rows, {}).loo_variance_scale(), sorted, 0.02 * sorted);
}

// What a prediction adds for a placement the fit has not seen is the spread of the placement
// effects it found (one EM step from the prior, shrunk towards it): all-reduce times that scatter
// by placement (+-0.4 in log) widen it above the prior's 0.1, a smooth truth narrows it. (One
// step from a prior that tight still falls short of 0.4: the fit shrank the effects towards it.)
TEST(ThroughputFit, AnUnseenValueCarriesTheSpreadTheFitFoundForItsKind) {
  const Truth t;
  const auto smooth = MeasureAll(t, Grid(), 21, 0.01);
  auto scattered = smooth;
  for (auto& d : scattered) {
    if (d.key.num_nodes < 2 || d.key.num_replicas < 2) continue;
    const double u = ((d.key.num_nodes + d.key.num_replicas) % 2 ? 0.4 : -0.4);
    const double tc = t.Compute(d.key.local_bsz);
    d.step_time = tc + (d.step_time - tc) * std::exp(u);
    d.sync_time *= std::exp(u);
  }
  ThroughputFitOptions options;
  options.obs_sigma = 0.01;
  const auto m0 = FitThroughput(smooth, options), m1 = FitThroughput(scattered, options);
  const double s0 = m0.ToJson()["model"]["placement_effect_sigma"].get<double>();
  const double s1 = m1.ToJson()["model"]["placement_effect_sigma"].get<double>();
  EXPECT_LT(s0, 0.8 * options.placement_effect_sigma) << s0;  // 0.065
  EXPECT_GT(s1, 1.3 * options.placement_effect_sigma) << s1;  // 0.149
  const ConfigKey unseen = Key(5, 10, 64);
  EXPECT_GT(m1.Predict(unseen).log_sigma, m0.Predict(unseen).log_sigma);
}

TEST(ThroughputFit, UncertaintyGrowsWithExtrapolation) {
  const auto m = FitThroughput(MeasureAll(Truth{}, Grid(), 13, 0.03));
  const double seen = m.Predict(Key(4, 8, 64)).log_sigma;
  const double far = m.Predict(Key(64, 256, 64)).log_sigma;
  const double new_bsz = m.Predict(Key(4, 8, 1024)).log_sigma;
  EXPECT_GT(far, seen);
  EXPECT_GT(new_bsz, seen);
}

TEST(ThroughputFit, MoreReplicasThanSeenCarryTheGrowthTermsUncertainty) {
  // A truth whose all-reduce grows like sqrt(R) (between the flat and the linear bound) over the
  // network, fitted on R <= 32: beyond that the smooth form's extrapolation is off, and the
  // growth term widens the interval with log(R / 32). Where the fit saw R, nothing changes.
  const Truth t;
  auto step = [&](const ConfigKey& k) {
    const double tc = t.Compute(k.local_bsz);
    if (k.num_replicas < 2) return tc;
    const double tn = k.num_nodes == 1 ? t.alpha_l + t.beta_l * (k.num_replicas - 2)
                                       : t.alpha_n * std::sqrt(k.num_replicas / 2.0);
    const double a = t.omega * tc;
    return tc + tn - std::pow(std::pow(a, -t.gamma) + std::pow(tn, -t.gamma), -1 / t.gamma);
  };
  std::mt19937 rng(17);
  std::normal_distribution<double> noise(0.0, 0.03);
  std::vector<Measurement> data;
  for (const auto& k : Grid()) {
    Measurement m;
    m.key = k;
    m.step_time = step(k) * std::exp(noise(rng));
    m.sync_time = std::min(0.95 * m.step_time, std::max(0.0, step(k) - t.Compute(k.local_bsz)));
    data.push_back(m);
  }
  ThroughputFitOptions off;
  off.growth_sigma = 0;
  const auto with = FitThroughput(data), without = FitThroughput(data, off);
  EXPECT_DOUBLE_EQ(with.Predict(Key(8, 32, 16)).log_sigma,
                   without.Predict(Key(8, 32, 16)).log_sigma);
  double last_extra = 0;
  for (int r : {64, 128, 256}) {
    const ConfigKey k = Key(r / 4, r, 16);
    const auto p = with.Predict(k), q = without.Predict(k);
    EXPECT_DOUBLE_EQ(p.step_time, q.step_time);  // the term widens, it does not move
    const double extra = p.log_sigma * p.log_sigma - q.log_sigma * q.log_sigma;
    const double bound = 0.29 * std::log(r / 32.0);
    EXPECT_GT(extra, last_extra) << "R = " << r;
    // Sensitivity <= 1; every term of the variance carries the leave-one-out check's factor.
    EXPECT_LE(extra, bound * bound * with.loo_variance_scale() * (1 + 1e-9)) << "R = " << r;
    last_extra = extra;
    const double z = std::abs(std::log(step(k) / p.step_time));
    EXPECT_LE(z, 2 * p.log_sigma) << "R = " << r << ": truth outside 2 sigma";
    if (r >= 128) {  // without the term the interval stays put while the error grows
      EXPECT_GT(z, 2 * q.log_sigma) << "R = " << r << ": the test needs a truth the form misses";
    }
  }
  // On one machine the bound is the largest single-machine replica count seen (4).
  EXPECT_GT(with.Predict(Key(1, 8, 16)).log_sigma, without.Predict(Key(1, 8, 16)).log_sigma);
  // The JSON keeps the term; a model written before it predicts without.
  auto j = with.ToJson();
  EXPECT_DOUBLE_EQ(ThroughputModel::FromJson(j, "m").Predict(Key(32, 128, 16)).log_sigma,
                   with.Predict(Key(32, 128, 16)).log_sigma);
  j["model"].erase("growth_sigma");
  EXPECT_DOUBLE_EQ(ThroughputModel::FromJson(j, "old").Predict(Key(32, 128, 16)).log_sigma,
                   without.Predict(Key(32, 128, 16)).log_sigma);
}

// Degenerate inputs fit without error, give finite predictions and flag what they cannot see.
void ExpectUsable(const ThroughputModel& m) {
  for (const auto& k : {Key(1, 1, 32), Key(1, 4, 64), Key(4, 16, 128), Key(16, 64, 16)}) {
    const auto p = m.Predict(k);
    EXPECT_TRUE(std::isfinite(p.step_time) && p.step_time > 0);
    EXPECT_TRUE(std::isfinite(p.log_sigma) && p.log_sigma > 0);
    EXPECT_GE(p.step_time, p.compute_time * (1 - 1e-12));
  }
  // The JSON of a degenerate fit round-trips too.
  const auto m2 = ThroughputModel::FromJson(m.ToJson(), "degenerate");
  EXPECT_DOUBLE_EQ(m2.Predict(Key(4, 16, 128)).step_time, m.Predict(Key(4, 16, 128)).step_time);
}

TEST(ThroughputDegenerate, OneConfiguration) {
  const Truth t;
  std::mt19937 rng(1);
  const auto m = FitThroughput({Measure(t, Key(2, 4, 64), &rng, 0.0)});
  ExpectUsable(m);
  EXPECT_NEAR(m.Predict(Key(2, 4, 64)).step_time / t.Step(Key(2, 4, 64)), 1.0, 0.02);
  for (int i : {kKappa, kAlphaL, kBetaL}) EXPECT_FALSE(m.identified(i)) << i;
  // One measurement cannot split compute into alpha_c and beta_c.
  EXPECT_FALSE(m.identified(kAlphaC) && m.identified(kBetaC));
}

TEST(ThroughputDegenerate, OneBatchSize) {
  std::vector<ConfigKey> keys;
  for (const auto& k : Grid())
    if (k.local_bsz == 64) keys.push_back(k);
  const auto m = FitThroughput(MeasureAll(Truth{}, keys, 2, 0.02));
  ExpectUsable(m);
  EXPECT_FALSE(m.identified(kKappa));
  EXPECT_FALSE(m.identified(kAlphaC) && m.identified(kBetaC));
  EXPECT_TRUE(m.identified(kAlphaN));
}

TEST(ThroughputDegenerate, OneReplicaOnly) {
  std::vector<ConfigKey> keys;
  for (int b : {16, 32, 64, 128, 256}) keys.push_back(Key(1, 1, b));
  const Truth t;
  const auto m = FitThroughput(MeasureAll(t, keys, 3, 0.01));
  ExpectUsable(m);
  EXPECT_TRUE(m.identified(kAlphaC));
  EXPECT_TRUE(m.identified(kBetaC));
  for (int i : {kAlphaL, kBetaL, kAlphaN, kBetaN, kDeltaN, kGamma})
    EXPECT_FALSE(m.identified(i)) << i;
  EXPECT_NEAR(m.Predict(Key(1, 1, 100)).step_time / t.Step(Key(1, 1, 100)), 1.0, 0.03);
  // Multi-GPU predictions rest on priors: much less certain than the measured kind.
  EXPECT_GT(m.Predict(Key(4, 16, 64)).log_sigma, 3 * m.Predict(Key(1, 1, 64)).log_sigma);
}

TEST(ThroughputDegenerate, OneNodeOnly) {
  std::vector<ConfigKey> keys;
  for (const auto& k : Grid())
    if (k.num_nodes == 1) keys.push_back(k);
  Truth t;  // an all-reduce that overlap cannot hide, so that the data can identify it
  t.alpha_l = 0.05;
  t.beta_l = 0.02;
  const auto m = FitThroughput(MeasureAll(t, keys, 4, 0.02));
  ExpectUsable(m);
  EXPECT_TRUE(m.identified(kAlphaL));
  for (int i : {kBetaN, kDeltaN}) EXPECT_FALSE(m.identified(i)) << i;
  EXPECT_TRUE(m.node_counts().empty());
}

TEST(ThroughputJson, RoundTripKeepsPredictions) {
  const auto data = MeasureAll(Truth{}, Grid(), 9, 0.03);
  const auto m = FitThroughput(data);
  const auto j = m.ToJson();
  EXPECT_EQ(j["schema"], "cloudtune.throughput_model/2");
  EXPECT_EQ(j["parameters"].size(), static_cast<size_t>(kNumThroughputParams));
  EXPECT_EQ(j["parameters"][kBetaC]["unit"], "s/sample");
  EXPECT_TRUE(j["fit"].contains("iterations"));
  const auto m2 = ThroughputModel::FromJson(nlohmann::json::parse(j.dump()), "m.json");
  for (const auto& k : {Key(1, 1, 16), Key(3, 9, 64), Key(12, 48, 100)}) {
    const auto a = m.Predict(k), b = m2.Predict(k);
    EXPECT_NEAR(a.step_time, b.step_time, 1e-12 * a.step_time);
    EXPECT_NEAR(a.log_sigma, b.log_sigma, 1e-9);
  }
  for (int i = 0; i < kNumThroughputParams; ++i) EXPECT_EQ(m.identified(i), m2.identified(i));
  EXPECT_EQ(m.loo_variance_scale(), m2.loo_variance_scale());
  EXPECT_EQ(m.compute_placements(), m2.compute_placements());
  EXPECT_EQ(m.compute_effect(3, 9), m2.compute_effect(3, 9));
}

std::string FromJsonError(const nlohmann::json& j) {
  try {
    ThroughputModel::FromJson(j, "model.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ThroughputJson, MalformedModelsAreRejectedWithTheField) {
  const auto good = FitThroughput(MeasureAll(Truth{}, Grid(), 9, 0.03)).ToJson();
  EXPECT_EQ(FromJsonError(nlohmann::json::array()), "model.json: not a JSON object");
  auto j = good;
  j["schema"] = "other/2";
  EXPECT_EQ(FromJsonError(j),
            "model.json: schema is \"other/2\", expected \"cloudtune.throughput_model/2\"");
  j = good;
  j.erase("schema");
  EXPECT_EQ(FromJsonError(j),
            "model.json: missing \"schema\" (expected \"cloudtune.throughput_model/2\")");
  j = good;
  j["parameters"][0]["value"] = -1;
  EXPECT_EQ(FromJsonError(j), "model.json: parameters[0] (alpha_c).value: must be positive");
  j = good;
  j["parameters"][1]["value"] = "fast";
  EXPECT_EQ(FromJsonError(j), "model.json: parameters[1] (beta_c).value: expected a number");
  j = good;
  j["parameters"].erase(2);
  EXPECT_EQ(FromJsonError(j), "model.json: parameters: missing \"kappa\"");
  j = good;
  j["parameters"][kOmega]["value"] = 1.5;
  EXPECT_EQ(FromJsonError(j), "model.json: parameters[10] (omega).value: must be in (0, 1]");
  j = good;
  j["compute_effects"][0]["num_nodes"] = 0;
  EXPECT_EQ(FromJsonError(j),
            "model.json: compute_effects[0]: expected integers 1 <= num_nodes <= num_replicas");
  j = good;
  j["model"].erase("b_ref");
  EXPECT_EQ(FromJsonError(j), "model.json: model.b_ref: missing");
  j = good;
  j["model"]["loo_variance_scale"] = 0.5;
  EXPECT_EQ(FromJsonError(j), "model.json: model.loo_variance_scale: must be a finite number >= 1");
  j = good;
  j["model"].erase("loo_variance_scale");  // a model written before the check: the variance as is
  EXPECT_EQ(ThroughputModel::FromJson(j, "model.json").loo_variance_scale(), 1.0);
  j = good;
  j["covariance"]["core"].erase(0);
  EXPECT_NE(FromJsonError(j).find("model.json: covariance.core: expected a "), std::string::npos);
}

}  // namespace
}  // namespace cloudtune::estimator
