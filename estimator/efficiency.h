// Statistical efficiency (DESIGN §4): gradient noise scale, gain of one step at batch B, goodput,
// and a model of how the noise scale drifts with batch and progress, fitted with Ceres, that
// predicts the optimizer steps needed to reach a target progress at any batch.
//
// CONTRACT used by search/ and plugin/ (keep these signatures; add freely):
//   NoiseState s{grad_sqr, grad_var, base_batch};
//   double g = Gain(s, batch);  double e = Efficiency(s, batch);
//   EfficiencyModel m = FitEfficiency(observations, opts);   // or EfficiencyModel::FromNoise(s)
//   StepsPrediction p = m.StepsToProgress(batch, from_progress, to_progress);
//   nlohmann::json j = m.ToJson();  EfficiencyModel::FromJson(j, "name");
//
// Drift model. Write r = tr(Sigma) / |G|^2 (the noise scale in units of B0: phi = B0 * r) and
// s = B / B0. What a job measures at batch B and progress P is modelled as
//     1 / r(P, s) = a(P) + b(P) * s^-gamma,      a, b >= 0,
// i.e. the squared-gradient estimate carries a part that shrinks with the batch (the estimator's
// bias and the different trajectory of a large-batch run), so the measured noise scale grows with
// the batch — like s^gamma while b dominates, saturating at 1/a for large B. We fit, at knots in
// progress, rho0(P) = log r(P, 1) and drift d(P) = log(r(P, inf) / r(P, 1)) >= 0 (d = 0 is the
// plain theory: the noise scale does not depend on the batch), by robust least squares on log r
// with smoothness priors across knots and a weak prior pulling d towards 0. gamma is a global
// exponent: fixed at its prior (drift_exponent) with two observed batches, fitted with that prior
// from three or more. Observations at a single batch cannot identify d: it is held at 0 and the
// model says so (single_batch()). Beyond the largest observed progress, rho0 grows by an
// exponent in [0, 1]: physics' prior (0.5 +- 0.29) updated by the job's own observations
// (EfficiencyFitOptions::fit_progress_growth), its uncertainty carried into every prediction.
//
// On the Pollux T4 validation traces (observing the two smallest batches, predicting 4-128x them)
// the plain theory is off by 11.1% median / 71.9% worst; this model by 0.8% / 5.6%
// (shared/eval/steps_accuracy.py).
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "estimator/core/types.h"

namespace cloudtune::estimator {

using core::NoiseState;  // estimator/core/types.h

// Progress (in B0-steps) made by one optimizer step at `batch` samples:
// (tr + |G|^2) / (tr / s + |G|^2), s = batch / B0. With grad_sqr == 0 and grad_var > 0 the limit s;
// with both 0 (nothing known) 1.
double Gain(const NoiseState& s, double batch);
// Statistical efficiency gain / s, in (0, 1] for batch >= B0.
double Efficiency(const NoiseState& s, double batch);
// Gain and efficiency from the ratio r = tr(Sigma)/|G|^2 (noise scale in units of B0) and
// s = batch / B0. r may be +infinity (gain = s).
double GainFromRatio(double r, double s);

struct StepsPrediction {
  double steps = 0;      // optimizer steps
  double log_sigma = 0;  // one standard deviation of log(steps)
  // Steps with the drift frozen at the largest observed batch (what the model would say without
  // extrapolating the batch dependence). Equal to `steps` when batch <= that batch.
  double steps_no_extrapolation = 0;
  // Steps by the plain theory (noise scale of B0, no drift).
  double steps_plain = 0;
};

using core::NoiseObservation;  // estimator/core/types.h

// Validation traces (DESIGN §5): columns progress,iteration,metric,grad_sqr,grad_var read by
// header (others ignored; metric is not used), one row per interval of a run at total batch
// `batch`; progress in B0-steps, non-decreasing; grad_var normalised to B0. Each row holds the
// averages over the interval since the previous row, so its statistics are placed at the
// interval's middle progress. Negative grad_sqr/grad_var are read (the estimator can produce them)
// and skipped by the fit. `max_progress` (optional) receives the largest progress of the file.
// Throws cloudtune::InputError "NAME:LINE:COL: column: what" (missing column, empty file, no rows,
// a non-numeric value, negative progress/iteration, progress going down, wrong field count).
std::vector<NoiseObservation> ParseValidationTrace(std::istream& in, const std::string& name,
                                                   double batch, double* max_progress = nullptr);
// Same, from a file ("PATH: cannot open" when it cannot be read).
std::vector<NoiseObservation> ReadValidationTrace(const std::string& path, double batch,
                                                  double* max_progress = nullptr);

struct EfficiencyFitOptions {
  // B0 (samples) that grad_var and progress refer to. 0 = the smallest observed batch.
  double base_batch = 0;
  // Most progress knots of the drift curves (the knots sit at quantiles of the observed progress).
  // >= 1.
  int max_knots = 64;
  // Above this many usable observations, each batch's observations are binned in progress (median
  // log ratio per bin) down to about this many in total, bounding the fit time. >= 2 * max_knots.
  int max_observations = 1000;
  // Assumed standard deviation of log(tr/|G|^2) of one observation; with the robust (Cauchy) loss
  // of that scale, outliers (the noisy first epochs, spikes) lose their weight. > 0.
  double obs_sigma = 0.25;
  // Standard deviation of the change of rho0 and d between neighbouring knots (log units). Smaller
  // = smoother curves. > 0.
  double smooth_sigma = 1.0;
  // Standard deviation of the prior on d around 0 (the plain theory). > 0.
  double drift_prior_sigma = 100.0;
  // Upper bound of d = log(r(inf) / r(B0)). > 0.
  double max_drift = 12.0;
  // Prior mean of gamma, the exponent of the batch dependence (1 = the bias shrinks like 1/B,
  // saturating fast; smaller = slower). 1 from the estimator: the sampling term of the squared-
  // gradient estimate at batch B is tr(Sigma)/B. Only a prior: fitted from the job's own
  // observations at >= 3 batches. In [0.1, 3].
  double drift_exponent = 1.0;
  // Standard deviation of gamma's prior, used when >= 3 batches are observed. > 0.
  double drift_exponent_sigma = 0.5;
  // Fit gamma when >= 3 batches are observed (else it stays at drift_exponent).
  bool fit_drift_exponent = true;
  // Relative uncertainty floor of a steps prediction (one sigma of log steps). >= 0.
  double min_log_sigma = 0.02;
  // Fraction of the extrapolation effect |log(steps / steps_no_extrapolation)| counted as
  // uncertainty. >= 0.
  double extrapolation_sigma = 0.3;
  // Standard deviation of the exponent delta of an unmodelled growth of the noise ratio with the
  // batch beyond the largest observed one, r ~ (B / B_max)^delta: what the job has not measured
  // may lie anywhere from no growth (delta = 0, the plain theory) to a noise scale growing in
  // proportion to the batch (delta = 1); a uniform delta on [0, 1] has standard deviation
  // 1/sqrt(12) = 0.29. A prediction at B > B_max carries growth_sigma * log(B / B_max) times the
  // steps' sensitivity to r (d log steps / d log r, in [0, 1]) as uncertainty. >= 0.
  double growth_sigma = 0.29;
  // Forecast the noise ratio's growth with progress beyond the largest observed progress P_max,
  // r(P) = r(P_max) * (P / P_max)^delta. Physics bounds delta before any observation: r does not
  // fall (|G|^2 shrinks as the loss falls while tr(Sigma) does not), and SGD on a quadratic grows
  // it like P (delta = 1); so the prior is uniform on [0, 1] (mean 0.5, standard deviation
  // 1/sqrt(12) = 0.29), taken as normal. The job's own observations over the upper half (in log
  // progress) of what it has seen, averaged per doubling of progress, give a least-squares slope
  // and its standard error (three or more doublings; records evenly spaced in time would otherwise
  // weigh the latest doubling alone, as if independent); delta is the posterior mean of the two,
  // within [0, 1]. Its standard deviation stays the prior's, and widens every prediction beyond
  // P_max: the records measure the exponent behind the job, not the one ahead (a decaying
  // learning rate lifts r, a run near its loss floor flattens it). false = flat beyond P_max, with
  // no such uncertainty.
  bool fit_progress_growth = true;
  bool IsValid(std::string* error) const;
};

class EfficiencyModel {
 public:
  // The plain theory: the noise state taken as constant (no drift). Its sampling uncertainty
  // (s.log_sigma) enters every prediction's log_sigma. `measured_batch` (samples): the batch the
  // state was measured at, which max_observed_batch() reports; <= 0 = the state's base batch.
  // `measured_progress` (B0-steps): the progress it was measured at; when > 0 (and
  // options.fit_progress_growth), beyond it r grows by the prior exponent of
  // EfficiencyFitOptions::fit_progress_growth, with its uncertainty. <= 0 = flat for all progress.
  static EfficiencyModel FromNoise(const NoiseState& s,
                                   const EfficiencyFitOptions& options = EfficiencyFitOptions(),
                                   double measured_batch = 0, double measured_progress = 0);
  // The same, measured at `progress` (B0-steps), with the prior growth updated by what the run's
  // observations at the one batch it has run show (`history`; the rule of
  // EfficiencyFitOptions::fit_progress_growth): a run that has not changed its batch cannot
  // identify the drift, but it does see its noise grow, or not. Observations beyond `progress` and
  // unusable ones (non-positive or non-finite statistics) are ignored.
  static EfficiencyModel FromNoiseAndHistory(
      const NoiseState& s, const std::vector<NoiseObservation>& history, double progress,
      const EfficiencyFitOptions& options = EfficiencyFitOptions(), double measured_batch = 0);
  // Gain of one step at `batch` when the run has made `progress` B0-steps.
  double GainAt(double batch, double progress) const;
  // Efficiency GainAt / (batch / B0).
  double EfficiencyAt(double batch, double progress) const {
    return GainAt(batch, progress) * base_batch_ / batch;
  }
  // Modelled r = tr(Sigma)/|G|^2 (noise scale / B0) measured at `batch` and `progress`.
  double NoiseRatioAt(double batch, double progress) const;
  // Steps at `batch` to go from `from_progress` to `to_progress` (B0-steps).
  StepsPrediction StepsToProgress(double batch, double from_progress, double to_progress) const;
  // Seconds to go from `from_progress` to `to_progress` at `batch` with `step_time` seconds per
  // optimizer step (log_sigma is that of the steps; add the step time's own in quadrature).
  StepsPrediction TimeToProgress(double batch, double from_progress, double to_progress,
                                 double step_time) const;
  nlohmann::json ToJson() const;
  // Throws cloudtune::InputError naming `source` and the field on a malformed or foreign model.
  static EfficiencyModel FromJson(const nlohmann::json& j, const std::string& source);

  double base_batch() const { return base_batch_; }
  // True when the drift could not be identified (observations at one batch): the plain theory.
  bool single_batch() const { return single_batch_; }
  // Largest progress and batch seen by the fit (FromNoise: 0 and the state's base batch).
  double max_observed_progress() const { return max_progress_; }
  double max_observed_batch() const { return max_batch_; }
  const std::vector<double>& observed_batches() const { return batches_; }
  // Fit statistics: observations used, skipped (non-positive or non-finite statistics), robust RMS
  // of the log-ratio residuals.
  int observations() const { return n_obs_; }
  int skipped() const { return n_skipped_; }
  double residual_rms() const { return residual_rms_; }
  // Exponent gamma of the batch dependence, and whether it was fitted (>= 3 batches).
  double drift_exponent() const { return gamma_; }
  bool drift_exponent_fitted() const { return gamma_fitted_; }
  // Exponent delta of the noise ratio's growth beyond the last knot, r ~ P^delta, in [0, 1]
  // (EfficiencyFitOptions::fit_progress_growth; 0 = flat), and its standard deviation.
  double progress_growth() const { return delta_; }
  double progress_growth_sigma() const { return delta_sigma_; }
  // The same model with the noise ratio held flat beyond the observed progress: for batches at
  // or above B0 the upper end of the steps the physics allows (r does not fall).
  EfficiencyModel WithoutProgressGrowth() const {
    EfficiencyModel m = *this;
    m.delta_ = 0;
    m.delta_sigma_ = 0;
    return m;
  }

  struct Knot {
    double progress = 0;
    double rho0 = 0;   // log r at B0
    double drift = 0;  // d = log(r(inf) / r(B0)) >= 0
  };
  const std::vector<Knot>& knots() const { return knots_; }

 private:
  friend EfficiencyModel FitEfficiency(const std::vector<NoiseObservation>&,
                                       const EfficiencyFitOptions&);
  // Interpolated (rho0, d) at progress: flat before the first knot; beyond the last, d flat and
  // rho0 growing by delta_ * log(P / P_last).
  void At(double progress, double* rho0, double* drift) const;
  double StepsAt(double batch, double from, double to, double cap_s) const;

  double base_batch_ = 1;
  bool single_batch_ = true;
  double max_progress_ = 0;
  double max_batch_ = 0;
  std::vector<double> batches_;
  int n_obs_ = 0, n_skipped_ = 0;
  double residual_rms_ = 0;
  double gamma_ = 1.0;
  bool gamma_fitted_ = false;
  double delta_ = 0, delta_sigma_ = 0;
  double min_log_sigma_ = 0.02, extrapolation_sigma_ = 0.3, growth_sigma_ = 0.29;
  double noise_log_sigma_ = 0;  // NoiseState::log_sigma of FromNoise's state
  std::vector<Knot> knots_;
};

// Bounds a job's noise history to `cap` observations (cap >= 1). While there are more, drops the
// oldest observation of the batch with the most observations (ties: the batch whose oldest is
// older). The fit needs both kinds of evidence a plain "keep the last cap" loses: every batch the
// job has run (how the noise measured at one batch relates to another: the drift) and the recent
// observations (the noise's level now, which grows as training progresses). Order is kept.
void ThinNoiseHistory(std::vector<NoiseObservation>* history, size_t cap);

// Fits the drift model. Deterministic. Throws cloudtune::InputError on invalid options, no usable
// observation (all with non-positive statistics) or a batch/progress that is not positive/finite.
EfficiencyModel FitEfficiency(const std::vector<NoiseObservation>& observations,
                              const EfficiencyFitOptions& options = {});

// Progress accounting over a sequence of batch changes: each Advance() adds the progress of
// `steps` optimizer steps at `batch` (gain per step from the noise state or model given), so that
// progress stays in units of steps at B0 whatever batches the job ran.
class ProgressAccount {
 public:
  explicit ProgressAccount(double base_batch = 1) : base_batch_(base_batch) {}
  // Adds `steps` steps at `batch` with the gain of `noise` (whose base_batch must equal ours).
  // Returns the progress added. Throws std::invalid_argument on negative steps or batch <= 0.
  double Advance(double steps, double batch, const NoiseState& noise);
  // Same, gain from `model` at the progress reached (integrated over the steps).
  double Advance(double steps, double batch, const EfficiencyModel& model);
  double progress() const { return progress_; }  // B0-steps
  double steps() const { return steps_; }        // optimizer steps at any batch
  double samples() const { return samples_; }    // samples processed
  double base_batch() const { return base_batch_; }
  struct Segment {
    double batch, steps, progress;  // batch, optimizer steps, progress made
  };
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  double base_batch_;
  double progress_ = 0, steps_ = 0, samples_ = 0;
  std::vector<Segment> segments_;
};

}  // namespace cloudtune::estimator
