#include "estimator/efficiency.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "estimator/core/error.h"
#include "tests/shared_data.h"

namespace cloudtune::estimator {
namespace {

// ---- formulas ---------------------------------------------------------------------------------

TEST(Efficiency, GainAndEfficiencyMatchHandComputedValues) {
  NoiseState s{1.0, 3.0, 32.0};  // |G|^2 = 1, tr(Sigma) = 3 at B0 = 32
  EXPECT_DOUBLE_EQ(s.noise_scale(), 96.0);
  // s = 4: (3 + 1) / (3/4 + 1) = 4 / 1.75
  EXPECT_NEAR(Gain(s, 128), 4.0 / 1.75, 1e-12);
  EXPECT_NEAR(Efficiency(s, 128), 4.0 / 1.75 / 4.0, 1e-12);
  // s = 2: 4 / 2.5 = 1.6
  EXPECT_NEAR(Gain(s, 64), 1.6, 1e-12);
  EXPECT_NEAR(Efficiency(s, 64), 0.8, 1e-12);
  EXPECT_DOUBLE_EQ(Gain(s, 32), 1.0);
  EXPECT_DOUBLE_EQ(Efficiency(s, 32), 1.0);
  // No gradient signal left: every sample counts (gain = s); nothing known: gain 1.
  EXPECT_DOUBLE_EQ(Gain(NoiseState{0.0, 2.0, 32.0}, 256), 8.0);
  EXPECT_DOUBLE_EQ(Gain(NoiseState{0.0, 0.0, 32.0}, 256), 1.0);
  EXPECT_TRUE(std::isinf(NoiseState{0.0, 2.0, 32.0}.noise_scale()));
  EXPECT_NEAR(GainFromRatio(3.0, 4.0), 4.0 / 1.75, 1e-12);
  EXPECT_DOUBLE_EQ(GainFromRatio(INFINITY, 4.0), 4.0);
}

TEST(Efficiency, FromNoiseIsThePlainTheory) {
  NoiseState s{1.0, 3.0, 32.0};
  EfficiencyModel m = EfficiencyModel::FromNoise(s);
  EXPECT_TRUE(m.single_batch());
  for (double b : {32.0, 64.0, 512.0}) {
    EXPECT_NEAR(m.GainAt(b, 0), Gain(s, b), 1e-12);
    EXPECT_NEAR(m.GainAt(b, 1e6), Gain(s, b), 1e-12);
    EXPECT_NEAR(m.EfficiencyAt(b, 10), Efficiency(s, b), 1e-12);
  }
  // Constant gain: steps = progress / gain.
  auto p = m.StepsToProgress(128, 100, 1100);
  EXPECT_NEAR(p.steps, 1000 / (4.0 / 1.75), 1e-6);
  EXPECT_NEAR(p.steps_plain, p.steps, 1e-9);
  EXPECT_GT(p.log_sigma, 0);
  EXPECT_EQ(m.StepsToProgress(128, 50, 50).steps, 0);
  auto t = m.TimeToProgress(128, 100, 1100, 0.5);
  EXPECT_NEAR(t.steps, 0.5 * p.steps, 1e-9);
}

// ---- progress accounting ----------------------------------------------------------------------

TEST(ProgressAccount, SequenceOfBatchChanges) {
  NoiseState s{1.0, 3.0, 32.0};
  ProgressAccount acc(32);
  EXPECT_DOUBLE_EQ(acc.Advance(100, 32, s), 100.0);             // gain 1
  EXPECT_NEAR(acc.Advance(50, 128, s), 50 * 4.0 / 1.75, 1e-9);  // gain 2.2857
  EXPECT_NEAR(acc.Advance(10, 64, s), 16.0, 1e-9);              // gain 1.6
  EXPECT_NEAR(acc.progress(), 100 + 50 * 4.0 / 1.75 + 16, 1e-9);
  EXPECT_DOUBLE_EQ(acc.steps(), 160);
  EXPECT_DOUBLE_EQ(acc.samples(), 100 * 32 + 50 * 128 + 10 * 64);
  ASSERT_EQ(acc.segments().size(), 3u);
  EXPECT_EQ(acc.segments()[1].batch, 128);
  EXPECT_NEAR(acc.segments()[2].progress, 16.0, 1e-9);
  // The model-based variant agrees with the plain theory when there is no drift.
  ProgressAccount acc2(32);
  EfficiencyModel m = EfficiencyModel::FromNoise(s);
  acc2.Advance(100, 32, m);
  acc2.Advance(50, 128, m);
  acc2.Advance(10, 64, m);
  EXPECT_NEAR(acc2.progress(), acc.progress(), 1e-6);
  EXPECT_THROW(acc.Advance(-1, 32, s), std::invalid_argument);
  EXPECT_THROW(acc.Advance(1, 0, s), std::invalid_argument);
  EXPECT_THROW(acc.Advance(1, 32, NoiseState{1, 3, 64}), std::invalid_argument);
}

// ---- drift fit ----------------------------------------------------------------------------------

// Ground truth of the synthetic runs: rho0 rises with progress, the drift too.
double TrueRho0(double p) { return std::log(2.0 + p / 50.0); }
double TrueDrift(double p) { return 0.5 + 2.0 * p / 1000.0; }
double TrueRatio(double p, double s, double gamma) {
  const double e = std::exp(-TrueDrift(p));
  return std::exp(TrueRho0(p)) / (e + (1 - e) * std::pow(s, -gamma));
}

std::vector<NoiseObservation> Synthetic(const std::vector<double>& batches, double gamma,
                                        double noise) {
  std::vector<NoiseObservation> obs;
  int i = 0;
  for (double b : batches)
    for (double p = 10; p <= 1000; p += 20, ++i) {
      // Deterministic pseudo-noise in log r, uniform in [-noise, noise].
      const double h = std::sin(12.9898 * i + 78.233 * b) * 43758.5453;
      const double eps = noise * (2 * (h - std::floor(h)) - 1);
      NoiseObservation o;
      o.batch = b;
      o.progress = p;
      o.grad_sqr = 0.01;
      o.grad_var = 0.01 * TrueRatio(p, b / batches.front(), gamma) * std::exp(eps);
      obs.push_back(o);
    }
  return obs;
}

TEST(EfficiencyFit, RecoversSyntheticDriftFromTwoBatches) {
  EfficiencyFitOptions opt;  // gamma fixed at its prior 1.0 = the truth here
  EfficiencyModel m = FitEfficiency(Synthetic({64, 128}, 1.0, 0.01), opt);
  EXPECT_FALSE(m.single_batch());
  EXPECT_FALSE(m.drift_exponent_fitted());
  EXPECT_EQ(m.base_batch(), 64);
  EXPECT_EQ(m.observations(), 100);
  for (const auto& k : m.knots()) {
    if (k.progress < 100 || k.progress > 900) continue;
    EXPECT_NEAR(k.rho0, TrueRho0(k.progress), 0.05) << k.progress;
    EXPECT_NEAR(k.drift, TrueDrift(k.progress), 0.25) << k.progress;
  }
  // The noise scale at batches never run (8x, 32x B0) is predicted within a few percent.
  for (double b : {512.0, 2048.0})
    for (double p : {200.0, 500.0, 800.0})
      EXPECT_NEAR(m.NoiseRatioAt(b, p) / TrueRatio(p, b / 64, 1.0), 1.0, 0.06) << b << " " << p;
}

// Observations at batches 64 and 128 whose noise ratio grows like P^delta over P in [10, 1000]
// (the drift held at 0.5), with +-0.05 of deterministic pseudo-noise in log r.
std::vector<NoiseObservation> Growing(double delta) {
  std::vector<NoiseObservation> obs;
  int i = 0;
  for (double b : {64.0, 128.0})
    for (double p = 10; p <= 1000; p += 10, ++i) {
      const double h = std::sin(12.9898 * i + 78.233 * b) * 43758.5453;
      const double eps = 0.05 * (2 * (h - std::floor(h)) - 1);
      const double e = std::exp(-0.5);
      NoiseObservation o;
      o.batch = b;
      o.progress = p;
      o.grad_sqr = 0.01;
      o.grad_var = 0.01 * 3 * std::pow(p / 10, delta) / (e + (1 - e) * 64 / b) * std::exp(eps);
      obs.push_back(o);
    }
  return obs;
}

TEST(EfficiencyFit, ForecastsTheNoiseGrowthItsObservationsSupportBeyondThem) {
  // r ~ P^0.6: the slope, drawn a little towards the prior's 0.5, and r beyond the observed
  // progress follows. How sure the forecast is stays the prior's 0.29: a steady slope behind the
  // job does not say the exponent ahead.
  EfficiencyModel m = FitEfficiency(Growing(0.6));
  EXPECT_GT(m.progress_growth(), 0.55);
  EXPECT_LE(m.progress_growth(), 0.62);
  EXPECT_NEAR(m.progress_growth_sigma(), 1 / std::sqrt(12.0), 1e-12);
  const double truth_4000 = 3 * std::pow(400.0, 0.6);
  EXPECT_NEAR(m.NoiseRatioAt(64, 4000) / truth_4000, 1.0, 0.15);
  // Beyond the observed progress a large batch needs fewer steps than the flat forecast says.
  EfficiencyFitOptions flat_opt;
  flat_opt.fit_progress_growth = false;
  EfficiencyModel flat = FitEfficiency(Growing(0.6), flat_opt);
  EXPECT_EQ(flat.progress_growth(), 0);
  EXPECT_DOUBLE_EQ(flat.NoiseRatioAt(64, 4000), flat.NoiseRatioAt(64, 1000));
  EXPECT_LT(m.StepsToProgress(4096, 1000, 4000).steps,
            0.9 * flat.StepsToProgress(4096, 1000, 4000).steps);
  // Within the observed progress the two agree.
  EXPECT_DOUBLE_EQ(m.NoiseRatioAt(128, 500), flat.NoiseRatioAt(128, 500));
  // No growth observed: next to none forecast (the evidence outweighs the prior).
  EXPECT_LT(FitEfficiency(Growing(0.0)).progress_growth(), 0.05);
  // Faster than SGD's 1/t loss gap (a decaying learning rate): kept at 1.
  EXPECT_EQ(FitEfficiency(Growing(2.0)).progress_growth(), 1);
  // A model from one noise state at no known progress: flat.
  EXPECT_EQ(EfficiencyModel::FromNoise(NoiseState{1, 3, 64}).progress_growth(), 0);
}

TEST(EfficiencyModel, BeforeAnyEvidenceThePhysicsPriorCentresTheGrowthAndWidensTheForecast) {
  // One noise state measured at batch 4096 and progress 1000, r = 3: beyond it r grows like P^0.5
  // (the middle of what physics allows, [0, 1]), and every forecast beyond it carries the prior's
  // 0.29.
  const NoiseState now{0.01, 0.03, 64};
  const EfficiencyModel m = EfficiencyModel::FromNoise(now, {}, 4096, 1000);
  EXPECT_DOUBLE_EQ(m.progress_growth(), 0.5);
  EXPECT_NEAR(m.progress_growth_sigma(), 1 / std::sqrt(12.0), 1e-12);
  EXPECT_DOUBLE_EQ(m.NoiseRatioAt(64, 500), 3);
  EXPECT_DOUBLE_EQ(m.NoiseRatioAt(64, 1000), 3);
  EXPECT_NEAR(m.NoiseRatioAt(64, 4000), 3 * 2, 1e-9);
  const EfficiencyModel flat = EfficiencyModel::FromNoise(now, {}, 4096);
  EXPECT_EQ(flat.progress_growth(), 0);
  EXPECT_EQ(flat.progress_growth_sigma(), 0);
  // A large batch needs fewer steps than the flat forecast says, and the forecast says how
  // unsure it is: wider at a batch whose steps follow r, as wide as flat up to the progress known.
  const StepsPrediction grow = m.StepsToProgress(4096, 1000, 16000);
  const StepsPrediction level = flat.StepsToProgress(4096, 1000, 16000);
  EXPECT_LT(grow.steps, 0.6 * level.steps);
  EXPECT_GT(grow.log_sigma, level.log_sigma + 0.3);
  EXPECT_LT(m.StepsToProgress(64, 1000, 16000).log_sigma, 0.1);  // at B0: no sensitivity to r
  EXPECT_DOUBLE_EQ(m.StepsToProgress(4096, 200, 1000).log_sigma,
                   flat.StepsToProgress(4096, 200, 1000).log_sigma);
  // The growth switched off: flat whatever the progress.
  EfficiencyFitOptions off;
  off.fit_progress_growth = false;
  EXPECT_EQ(EfficiencyModel::FromNoise(now, off, 64, 1000).progress_growth(), 0);
  EXPECT_EQ(EfficiencyModel::FromNoise(now, off, 64, 1000).progress_growth_sigma(), 0);
  // Observations too few to show a slope leave the prior as it is.
  const std::vector<NoiseObservation> level_obs = Growing(0.0);
  const std::vector<NoiseObservation> two{level_obs[0], level_obs[1], level_obs[100]};
  const EfficiencyModel sparse = FitEfficiency(two);
  EXPECT_DOUBLE_EQ(sparse.progress_growth(), 0.5);
  EXPECT_NEAR(sparse.progress_growth_sigma(), 1 / std::sqrt(12.0), 1e-12);
}

TEST(EfficiencyModel, ARunAtOneBatchUpdatesThePriorGrowthByWhatItsObservationsShow) {
  // The observations at batch 64 alone: the drift is not identified, the growth is.
  std::vector<NoiseObservation> one;
  for (const auto& o : Growing(0.6))
    if (o.batch == 64) one.push_back(o);
  const NoiseState now{0.01, 0.01 * 3 * std::pow(100.0, 0.6), 64};  // r at P = 1000
  const EfficiencyModel m = EfficiencyModel::FromNoiseAndHistory(now, one, 1000);
  EXPECT_GT(m.progress_growth(), 0.5);
  EXPECT_LE(m.progress_growth(), 0.62);
  EXPECT_NEAR(m.progress_growth_sigma(), 1 / std::sqrt(12.0), 1e-12);
  EXPECT_TRUE(m.single_batch());
  // The state now up to its progress; beyond it, the growth.
  EXPECT_DOUBLE_EQ(m.NoiseRatioAt(64, 500), now.noise_scale() / 64);
  EXPECT_NEAR(m.NoiseRatioAt(64, 4000) / (3 * std::pow(400.0, 0.6)), 1.0, 0.15);
  // Flat observations: next to no growth forecast.
  std::vector<NoiseObservation> level;
  for (const auto& o : Growing(0.0))
    if (o.batch == 64) level.push_back(o);
  const EfficiencyModel flat = EfficiencyModel::FromNoiseAndHistory(now, level, 1000);
  EXPECT_LT(flat.progress_growth(), 0.05);
  EXPECT_LT(m.StepsToProgress(4096, 1000, 4000).steps,
            0.9 * flat.StepsToProgress(4096, 1000, 4000).steps);
  // One state recorded again and again (a stalled estimator, a held value) is one measurement, not
  // a flat growth known exactly: the prior stands.
  std::vector<NoiseObservation> held;
  for (double p = 100; p <= 1000; p += 50) held.push_back({64, p, 0, 0.01, 0.03});
  const EfficiencyModel stalled = EfficiencyModel::FromNoiseAndHistory(now, held, 1000);
  EXPECT_DOUBLE_EQ(stalled.progress_growth(), 0.5);
  EXPECT_NEAR(stalled.progress_growth_sigma(), 1 / std::sqrt(12.0), 1e-12);
  // No history: the prior. Growth turned off, or no progress: flat.
  EXPECT_DOUBLE_EQ(EfficiencyModel::FromNoiseAndHistory(now, {}, 1000).progress_growth(), 0.5);
  EfficiencyFitOptions off;
  off.fit_progress_growth = false;
  EXPECT_EQ(EfficiencyModel::FromNoiseAndHistory(now, one, 1000, off).progress_growth(), 0);
  EXPECT_EQ(EfficiencyModel::FromNoiseAndHistory(now, one, 0).progress_growth(), 0);
  // The forecast travels with the model.
  const EfficiencyModel back =
      EfficiencyModel::FromJson(nlohmann::json::parse(m.ToJson().dump()), "m");
  EXPECT_DOUBLE_EQ(back.NoiseRatioAt(64, 4000), m.NoiseRatioAt(64, 4000));
  EXPECT_DOUBLE_EQ(back.progress_growth_sigma(), m.progress_growth_sigma());
}

// Records of r at batch 64, one every `every` units of progress up to 1000: r grows like P^0.5
// up to P = 320, then stays flat (a learning rate's phase between two drops), with a scatter of
// +-5 % from record to record.
std::vector<NoiseObservation> GrowsThenLevels(double every) {
  std::vector<NoiseObservation> obs;
  int i = 0;
  for (double p = 10; p <= 1000; p += every, ++i) {
    const double h = std::sin(12.9898 * i) * 43758.5453;
    const double eps = 0.05 * (2 * (h - std::floor(h)) - 1);
    obs.push_back({64, p, 0, 0.01, 0.01 * 3 * std::sqrt(std::min(p, 320.0) / 10) * std::exp(eps)});
  }
  return obs;
}

TEST(EfficiencyModel, AForecastCoversAGrowthThatChangesAfterTheObservedStretch) {
  // A run at batch 1024 (B0 = 64) whose noise ratio grew like P^0.3 up to P = 1000, steadily
  // (+-2 %), then grows like P^0.9 (a learning-rate drop): what a run of ImageNet shows before its
  // first decay. The records fix the exponent behind the job to a few hundredths; the forecast at
  // the batch it runs must still cover the one ahead, which the physics allows anywhere in [0, 1].
  auto r_at = [](double p) {
    return p <= 1000 ? 3 * std::pow(p / 10, 0.3)
                     : 3 * std::pow(100.0, 0.3) * std::pow(p / 1000, 0.9);
  };
  std::vector<NoiseObservation> history;
  int i = 0;
  for (double p = 10; p <= 1000; p += 5, ++i) {
    const double h = std::sin(12.9898 * i) * 43758.5453;
    const double eps = 0.02 * (2 * (h - std::floor(h)) - 1);
    history.push_back({1024, p, 0, 0.01, 0.01 * r_at(p) * std::exp(eps)});
  }
  const NoiseState now{0.01, 0.01 * r_at(1000), 64};
  const EfficiencyModel m = EfficiencyModel::FromNoiseAndHistory(now, history, 1000, {}, 1024);
  EXPECT_NEAR(m.progress_growth(), 0.3, 0.05);  // the past, as measured
  double truth = 0;
  const int n = 20000;
  for (int k = 0; k < n; ++k)
    truth += (7000.0 / n) / GainFromRatio(r_at(1000 + 7000.0 * (k + 0.5) / n), 16);
  const StepsPrediction pred = m.StepsToProgress(1024, 1000, 8000);
  EXPECT_GT(pred.steps, truth * 1.1);  // the change was not foreseen...
  EXPECT_LE(std::abs(std::log(pred.steps / truth)), 2 * pred.log_sigma)  // ...but is covered
      << "predicted " << pred.steps << " truth " << truth << " sigma " << pred.log_sigma;
}

TEST(EfficiencyModel, RecordsMoreOftenDoNotMoveTheGrowthForecast) {
  // Records come evenly in time, so most of them fall in the latest doubling of progress, here the
  // flat stretch. Counted one by one they would weigh that stretch alone and read their scatter as
  // independent (a flat growth known to a few thousandths, outweighing the prior). Per doubling of
  // progress the history shows growth, then none: the forecast stays between the two, at either
  // rate of records.
  const NoiseState now{0.01, 0.01 * 3 * std::sqrt(32.0), 64};  // r at P = 1000
  const EfficiencyModel sparse =
      EfficiencyModel::FromNoiseAndHistory(now, GrowsThenLevels(10), 1000);
  const EfficiencyModel dense = EfficiencyModel::FromNoiseAndHistory(now, GrowsThenLevels(1), 1000);
  for (const EfficiencyModel* m : {&sparse, &dense}) {
    EXPECT_GT(m->progress_growth(), 0.1);
    EXPECT_LT(m->progress_growth(), 0.5);
  }
  EXPECT_NEAR(dense.progress_growth(), sparse.progress_growth(), 0.05);
}

TEST(EfficiencyFit, FitsTheExponentFromThreeBatches) {
  EfficiencyFitOptions opt;
  EfficiencyModel m = FitEfficiency(Synthetic({64, 128, 512}, 0.6, 0.01), opt);
  EXPECT_TRUE(m.drift_exponent_fitted());
  // Pulled from the prior (1.0) most of the way to the truth (0.6).
  EXPECT_NEAR(m.drift_exponent(), 0.6, 0.12);
  EXPECT_LT(m.drift_exponent(), 0.75);
  opt.fit_drift_exponent = false;
  EfficiencyModel fixed = FitEfficiency(Synthetic({64, 128, 512}, 0.6, 0.01), opt);
  EXPECT_FALSE(fixed.drift_exponent_fitted());
  EXPECT_DOUBLE_EQ(fixed.drift_exponent(), 1.0);
}

// Steps from progress 10 to 1000 at s x B0 under the synthetic truth (fine midpoint rule).
double TrueSteps(double s, double gamma) {
  double steps = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double p = 10 + (990.0 * (i + 0.5)) / n;
    steps += (990.0 / n) / GainFromRatio(TrueRatio(p, s, gamma), s);
  }
  return steps;
}

// The uncertainty of a prediction grows with log(B / B_max observed), and covers a truth whose
// drift the observations cannot pin down: exponent 0.4 (slow saturation: the noise scale keeps
// growing far beyond the observed batches) while the fit, from two batches, keeps its prior 1.0.
TEST(EfficiencyFit, UncertaintyGrowsWithTheBatchRatioAndCoversADriftingTruth) {
  const double gamma = 0.4;
  EfficiencyModel m = FitEfficiency(Synthetic({64, 128}, gamma, 0.01));
  ASSERT_FALSE(m.drift_exponent_fitted());
  EXPECT_EQ(m.max_observed_batch(), 128);
  double last_sigma = 0;
  int within1 = 0, n = 0;
  for (double s : {2.0, 4.0, 8.0, 16.0, 32.0, 64.0}) {
    const auto pred = m.StepsToProgress(64 * s, 10, 1000);
    EXPECT_GT(pred.log_sigma, last_sigma) << s;  // grows with the ratio
    last_sigma = pred.log_sigma;
    const double err = std::abs(std::log(pred.steps / TrueSteps(s, gamma)));
    EXPECT_LE(err, 2 * pred.log_sigma) << "s " << s << " sigma " << pred.log_sigma;
    within1 += err <= pred.log_sigma;
    ++n;
  }
  EXPECT_GE(within1, n - 1);
  // Sequential: observe the k smallest batches (doublings), predict the next one.
  std::vector<double> batches = {64, 128};
  for (double next = 256; next <= 4096; next *= 2) {
    EfficiencyModel seq = FitEfficiency(Synthetic(batches, gamma, 0.01));
    const auto pred = seq.StepsToProgress(next, 10, 1000);
    const double err = std::abs(std::log(pred.steps / TrueSteps(next / 64, gamma)));
    EXPECT_LE(err, 2 * pred.log_sigma) << next << " sigma " << pred.log_sigma;
    EXPECT_LT(err, 0.15) << next;
    batches.push_back(next);
  }
  // The term scales with growth_sigma (0 = only the fit's own uncertainty).
  EfficiencyFitOptions none;
  none.growth_sigma = 0;
  EXPECT_LT(FitEfficiency(Synthetic({64, 128}, gamma, 0.01), none)
                .StepsToProgress(4096, 10, 1000)
                .log_sigma,
            0.5 * m.StepsToProgress(4096, 10, 1000).log_sigma);
  // Within the observed batches the growth term is zero: only the floor and the fit's noise.
  EXPECT_LT(m.StepsToProgress(128, 10, 1000).log_sigma, m.StepsToProgress(256, 10, 1000).log_sigma);
}

// The scatter of the measured noise ratio around the fitted curves reaches the steps through their
// sensitivity to that ratio (the delta method): a job whose noise dwarfs every batch (efficiency
// ~1) gets the floor however noisy its records, one whose batch nears its noise scale gets more.
TEST(EfficiencyFit, TheRecordsScatterCountsAsMuchAsTheStepsDependOnTheNoise) {
  const std::vector<NoiseObservation> obs = Synthetic({64, 256, 1024}, 1.0, 2.0);
  std::vector<NoiseObservation> huge = obs;  // the same scatter, 1e5 times the noise
  for (auto& o : huge) o.grad_var *= 1e5;
  const EfficiencyFitOptions opt;
  const EfficiencyModel m = FitEfficiency(obs, opt), h = FitEfficiency(huge, opt);
  ASSERT_GT(m.residual_rms(), 0.1);
  ASSERT_NEAR(h.residual_rms(), m.residual_rms(), 0.05);
  // Within the observed batches (no growth term): what the scatter adds above the floor.
  const auto above_floor = [&](const EfficiencyModel& x) {
    const double v = x.StepsToProgress(1024, 10, 1000).log_sigma;
    return std::sqrt(std::max(0.0, v * v - opt.min_log_sigma * opt.min_log_sigma));
  };
  EXPECT_GT(above_floor(m), 0.005);
  EXPECT_LT(above_floor(h), 0.001);  // was as much as m's, through a sensitivity of 1 - 1/sqrt(s)
}

// The noise state's own sampling error enters the plain theory's predictions.
TEST(Efficiency, FromNoiseCarriesTheNoiseStatesSamplingError) {
  NoiseState s;
  s.grad_sqr = 1;
  s.grad_var = 10;
  s.base_batch = 32;
  const double exact = EfficiencyModel::FromNoise(s).StepsToProgress(512, 0, 1000).log_sigma;
  s.log_sigma = 0.3;
  const double noisy = EfficiencyModel::FromNoise(s).StepsToProgress(512, 0, 1000).log_sigma;
  // Added in quadrature through the steps' sensitivity to r = 10 at s = 16:
  // 10/11 - (10/16)/(10/16 + 1) = 0.5245.
  EXPECT_NEAR(noisy * noisy - exact * exact, std::pow(0.3 * 0.524476, 2), 1e-4);
  // At the measured batch the gain is 1 whatever the noise: no extra uncertainty.
  EXPECT_NEAR(
      EfficiencyModel::FromNoise(s).StepsToProgress(32, 0, 1000).log_sigma,
      EfficiencyModel::FromNoise(NoiseState{1, 10, 32}).StepsToProgress(32, 0, 1000).log_sigma,
      1e-12);
}

TEST(EfficiencyFit, StepsMatchTheTrueIntegral) {
  EfficiencyModel m = FitEfficiency(Synthetic({64, 128}, 1.0, 0.0));
  // Steps at 16x B0 from the true drift (fine midpoint rule).
  double truth = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double p = 10 + (990.0 * (i + 0.5)) / n;
    truth += (990.0 / n) / GainFromRatio(TrueRatio(p, 16, 1.0), 16);
  }
  auto pred = m.StepsToProgress(1024, 10, 1000);
  EXPECT_NEAR(pred.steps / truth, 1.0, 0.02);
  // The plain theory (no drift) needs clearly more steps.
  EXPECT_GT(pred.steps_plain, 1.1 * truth);
  EXPECT_GE(pred.log_sigma, EfficiencyFitOptions{}.min_log_sigma);
}

TEST(EfficiencyFit, BinsLongHistoriesWithoutChangingThePrediction) {
  // 2 x 2,500 observations (a live job's history) with 5% noise: binned to ~1,000 by default.
  std::vector<NoiseObservation> obs;
  for (double b : {64.0, 128.0})
    for (int i = 0; i < 2500; ++i) {
      const double p = 10 + 990.0 * i / 2499;
      const double h = std::sin(12.9898 * i + 78.233 * b) * 43758.5453;
      obs.push_back({b, p, 0, 1.0,
                     TrueRatio(p, b / 64, 0.8) * std::exp(0.05 * (2 * (h - std::floor(h)) - 1))});
    }
  EfficiencyModel binned = FitEfficiency(obs);
  EfficiencyFitOptions all;
  all.max_observations = 100000;
  EfficiencyModel full = FitEfficiency(obs, all);
  EXPECT_EQ(binned.observations(), 5000);
  const double a = binned.StepsToProgress(2048, 10, 1000).steps;
  const double b = full.StepsToProgress(2048, 10, 1000).steps;
  EXPECT_NEAR(a / b, 1.0, 0.01);
}

TEST(EfficiencyFit, SingleBatchFallsBackToThePlainTheoryAndSaysSo) {
  EfficiencyModel m = FitEfficiency(Synthetic({64}, 0.8, 0.01));
  EXPECT_TRUE(m.single_batch());
  for (const auto& k : m.knots()) EXPECT_EQ(k.drift, 0.0);
  EXPECT_NEAR(m.NoiseRatioAt(4096, 500), m.NoiseRatioAt(64, 500), 1e-9);
  auto p = m.StepsToProgress(1024, 0, 1000);
  EXPECT_NEAR(p.steps, p.steps_plain, 1e-9);
  EXPECT_EQ(m.ToJson()["single_batch"], true);
  // The known over-prediction of the plain theory at large batches widens the uncertainty.
  EXPECT_GT(p.log_sigma, m.StepsToProgress(128, 0, 1000).log_sigma);
}

TEST(EfficiencyFit, SkipsNonPositiveStatisticsAndRejectsBadInput) {
  auto obs = Synthetic({64, 128}, 0.8, 0.0);
  obs[3].grad_sqr = -1;
  obs[7].grad_var = 0;
  EfficiencyModel m = FitEfficiency(obs);
  EXPECT_EQ(m.skipped(), 2);
  EXPECT_EQ(m.observations(), 98);
  EXPECT_THROW(FitEfficiency({}), InputError);
  std::vector<NoiseObservation> bad{{0, 1, 1, 1, 1}};
  try {
    FitEfficiency(bad);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "efficiency fit: observation 0: batch must be positive and finite");
  }
  std::vector<NoiseObservation> none{{64, 1, 1, -1, 1}};
  try {
    FitEfficiency(none);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "efficiency fit: no observation with positive grad_sqr and grad_var");
  }
}

// A job measures its noise at every record; it keeps a bounded history. Thinning the most-observed
// batch keeps the evidence of every batch it has run (the drift needs it) and the newest records
// (the level now); dropping the oldest would lose the first batches after `cap` records.
TEST(NoiseHistory, ThinningKeepsEveryBatchAndTheNewestRecords) {
  std::vector<NoiseObservation> h;
  double progress = 0;
  auto record = [&](double batch) {
    progress += 10;
    h.push_back({batch, progress, 0, 1.0, 2.0});
    ThinNoiseHistory(&h, 16);
  };
  for (int i = 0; i < 3; ++i) record(256);
  for (int i = 0; i < 3; ++i) record(512);
  for (int i = 0; i < 100; ++i) record(1024);
  ASSERT_EQ(h.size(), 16u);
  int n256 = 0, n512 = 0;
  for (const auto& o : h) n256 += o.batch == 256, n512 += o.batch == 512;
  EXPECT_EQ(n256, 3);
  EXPECT_EQ(n512, 3);
  EXPECT_DOUBLE_EQ(h.back().progress, progress);   // the newest record is kept
  EXPECT_DOUBLE_EQ(h[6].progress, progress - 90);  // then the 10 newest at 1024, in order
  for (size_t i = 1; i < h.size(); ++i) EXPECT_LT(h[i - 1].progress, h[i].progress);
  // The fit still sees the three batches.
  const EfficiencyModel m = FitEfficiency(h);
  EXPECT_EQ(m.observed_batches().size(), 3u);
  EXPECT_DOUBLE_EQ(m.max_observed_batch(), 1024);

  // Two batches past the cap in turn: each keeps an even share, the oldest of the larger share
  // goes first (ties: the batch whose oldest record is older).
  h.clear();
  for (int i = 0; i < 40; ++i) record(i % 2 ? 64.0 : 32.0);
  ASSERT_EQ(h.size(), 16u);
  int n32 = 0;
  for (const auto& o : h) n32 += o.batch == 32;
  EXPECT_EQ(n32, 8);
  EXPECT_DOUBLE_EQ(h.front().progress, progress - 150);
  // A cap below 1 keeps one observation.
  ThinNoiseHistory(&h, 0);
  ASSERT_EQ(h.size(), 1u);
}

TEST(Efficiency, FromNoiseReportsTheBatchItWasMeasuredAt) {
  const NoiseState s{1.0, 3.0, 32.0};
  EXPECT_DOUBLE_EQ(EfficiencyModel::FromNoise(s).max_observed_batch(), 32);
  const EfficiencyModel m = EfficiencyModel::FromNoise(s, EfficiencyFitOptions(), 512);
  EXPECT_DOUBLE_EQ(m.max_observed_batch(), 512);
  // Only what it reports as observed changes, not the plain theory's predictions.
  EXPECT_DOUBLE_EQ(m.GainAt(128, 0), EfficiencyModel::FromNoise(s).GainAt(128, 0));
}

TEST(EfficiencyFit, DefaultOptionsAreValidAndBadOnesAreNamed) {
  std::string err;
  EXPECT_TRUE(EfficiencyFitOptions{}.IsValid(&err)) << err;
  EfficiencyFitOptions o;
  o.obs_sigma = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "obs_sigma must be > 0");
  o = {};
  o.max_knots = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "max_knots must be >= 1");
  o = {};
  o.max_observations = 10;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "max_observations must be >= 2 * max_knots");
  o = {};
  o.drift_exponent = 5;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "drift_exponent must be in [0.1, 3]");
  EXPECT_THROW(FitEfficiency(Synthetic({64}, 1, 0), o), InputError);
}

TEST(EfficiencyModel, JsonRoundTripAndErrors) {
  EfficiencyModel m = FitEfficiency(Synthetic({64, 128}, 0.8, 0.01));
  nlohmann::json j = m.ToJson();
  EXPECT_EQ(j["schema"], "cloudtune.efficiency_model/1");
  EfficiencyModel back = EfficiencyModel::FromJson(nlohmann::json::parse(j.dump()), "m.json");
  EXPECT_EQ(back.single_batch(), m.single_batch());
  EXPECT_EQ(back.knots().size(), m.knots().size());
  EXPECT_DOUBLE_EQ(back.StepsToProgress(1024, 0, 900).steps, m.StepsToProgress(1024, 0, 900).steps);
  EXPECT_DOUBLE_EQ(back.StepsToProgress(1024, 0, 900).log_sigma,
                   m.StepsToProgress(1024, 0, 900).log_sigma);

  auto err = [](const nlohmann::json& x) {
    try {
      EfficiencyModel::FromJson(x, "m.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json foreign = j;
  foreign["schema"] = "cloudtune.throughput_model/1";
  EXPECT_EQ(
      err(foreign),
      "m.json: schema: 'cloudtune.throughput_model/1' is not \"cloudtune.efficiency_model/1\"");
  nlohmann::json no_knots = j;
  no_knots.erase("knots");
  EXPECT_EQ(err(no_knots), "m.json: knots: missing or not a non-empty array");
  nlohmann::json neg = j;
  neg["knots"][1]["drift"] = -1;
  EXPECT_EQ(err(neg), "m.json: knots[1].drift: must be >= 0");
  EfficiencyModel g = FitEfficiency(Growing(0.6));
  EfficiencyModel g_back = EfficiencyModel::FromJson(nlohmann::json::parse(g.ToJson().dump()), "g");
  EXPECT_DOUBLE_EQ(g_back.progress_growth(), g.progress_growth());
  EXPECT_DOUBLE_EQ(g_back.progress_growth_sigma(), g.progress_growth_sigma());
  EXPECT_DOUBLE_EQ(g_back.NoiseRatioAt(64, 4000), g.NoiseRatioAt(64, 4000));
  EXPECT_DOUBLE_EQ(g_back.StepsToProgress(4096, 1000, 4000).log_sigma,
                   g.StepsToProgress(4096, 1000, 4000).log_sigma);
  nlohmann::json wide = g.ToJson();
  wide["uncertainty"]["progress_growth_sigma"] = -0.1;
  EXPECT_EQ(err(wide), "m.json: uncertainty.progress_growth_sigma: must be >= 0");
  nlohmann::json steep = g.ToJson();
  steep["progress_growth"] = 1.5;
  EXPECT_EQ(err(steep), "m.json: progress_growth: must be in [0, 1]");
  nlohmann::json old = g.ToJson();  // written before the growth: flat
  old.erase("progress_growth");
  EXPECT_EQ(EfficiencyModel::FromJson(old, "old").progress_growth(), 0);
  EXPECT_EQ(err(nlohmann::json::array()), "m.json: efficiency model: not a JSON object");
}

// ---- validation traces --------------------------------------------------------------------------

std::string ParseError(const std::string& text) {
  std::istringstream in(text);
  try {
    ParseValidationTrace(in, "v.csv", 128);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ValidationTrace, ReadsByHeaderAtIntervalMidpoints) {
  std::istringstream in(
      "grad_var,metric,progress,iteration,grad_sqr\n"
      "4,0.5,100,100,2\n"
      "6,0.6,300,200,-1\n");
  double maxp = 0;
  auto obs = ParseValidationTrace(in, "v.csv", 128, &maxp);
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_EQ(maxp, 300);
  EXPECT_EQ(obs[0].batch, 128);
  EXPECT_EQ(obs[0].progress, 50);
  EXPECT_EQ(obs[1].progress, 200);
  EXPECT_EQ(obs[1].iteration, 200);
  EXPECT_EQ(obs[1].grad_sqr, -1);
  EXPECT_EQ(obs[1].grad_var, 6);
}

TEST(ValidationTrace, BadInputNamesFileLineAndColumn) {
  EXPECT_EQ(ParseError(""), "v.csv:1: empty file (no header)");
  EXPECT_EQ(ParseError("progress,iteration,metric,grad_sqr\n1,1,1,1\n"),
            "v.csv:1: missing column 'grad_var'");
  EXPECT_EQ(ParseError("progress,iteration,metric,grad_sqr,grad_var\n"),
            "v.csv:1: no data rows after the header");
  EXPECT_EQ(ParseError("progress,iteration,metric,grad_sqr,grad_var\n1,1,1,abc,1\n"),
            "v.csv:2:4: grad_sqr: 'abc' is not a finite number");
  EXPECT_EQ(ParseError("progress,iteration,metric,grad_sqr,grad_var\n-1,1,1,1,1\n"),
            "v.csv:2:1: progress: -1 is negative");
  EXPECT_EQ(ParseError("progress,iteration,metric,grad_sqr,grad_var\n5,1,1,1,1\n4,2,1,1,1\n"),
            "v.csv:3:1: progress: 4 is less than the previous row's");
  EXPECT_EQ(ParseError("progress,iteration,metric,grad_sqr,grad_var\n5,1,1,1\n"),
            "v.csv:2: expected 5 fields, found 4");
  EXPECT_THROW(ReadValidationTrace("/nonexistent/v.csv", 1), InputError);
}

// ---- the shipped Pollux validation traces: a regression gate ------------------------------------

struct Case {
  const char* model;
  int b0, b1, batch;
  double max_error;  // relative
};

TEST(EfficiencyOnPolluxTraces, PredictsStepsAtLargerBatchesFromTheTwoSmallest) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string dir = std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/";
  // The gate is the target (max 15 %), not the last measurement: with the drift exponent's prior
  // from theory (1.0) rather than chosen on these files, cifar10 2048 is 9.4 % and 4096 11.7 % off.
  // The plain theory is off by 45%, 72%, 56%, 53%, 16%.
  const Case cases[] = {{"cifar10", 128, 256, 2048, 0.15},
                        {"cifar10", 128, 256, 4096, 0.15},
                        {"imagenet", 200, 400, 12800, 0.15},
                        {"bert", 12, 24, 384, 0.15},
                        {"ncf", 256, 512, 32768, 0.15}};
  for (const Case& c : cases) {
    auto path = [&](int b) { return dir + c.model + "/validation-" + std::to_string(b) + ".csv"; };
    auto obs = ReadValidationTrace(path(c.b0), c.b0);
    auto more = ReadValidationTrace(path(c.b1), c.b1);
    obs.insert(obs.end(), more.begin(), more.end());
    double target_p = 0;
    auto actual_rows = ReadValidationTrace(path(c.batch), c.batch, &target_p);
    const double actual = actual_rows.back().iteration;
    EfficiencyModel m = FitEfficiency(obs);
    EXPECT_FALSE(m.single_batch());
    auto pred = m.StepsToProgress(c.batch, 0, target_p);
    const double err = std::abs(pred.steps - actual) / actual;
    EXPECT_LT(err, c.max_error) << c.model << " B=" << c.batch << " predicted " << pred.steps
                                << " actual " << actual;
    // Better than the plain theory, and the truth within ~2 sigma.
    EXPECT_LT(err, std::abs(pred.steps_plain - actual) / actual) << c.model;
    EXPECT_LT(std::abs(std::log(pred.steps / actual)), 2 * pred.log_sigma) << c.model;
  }
}

}  // namespace
}  // namespace cloudtune::estimator
