// Gradient noise scale estimator (DESIGN §4). Plain C++ (no torch): the hooks feed it two scalars
// per optimizer step and it keeps moving averages whose window follows the estimator's own
// variance.
//
// Per step, with `count` micro-batch gradients g_k of `micro_batch` samples each (count = replicas
// x accumulation micro-steps) and their average ḡ (for unequal batches see GnsSample):
//   local_sqr = mean_k |g_k|^2,  total_sqr = |ḡ|^2
//   |G|^2     ≈ (count·total_sqr − local_sqr) / (count − 1)
//   tr(Σ₁)    ≈ (local_sqr − total_sqr) · micro_batch · count / (count − 1)   (per-sample variance)
// Both are unbiased because E|g_k|^2 = |G|^2 + tr(Σ₁)/micro_batch. The EMAs smooth |G|^2 and the
// per-sample tr(Σ₁) (so a batch-size change does not disturb them); State() reports
// grad_var = tr(Σ₁)/base_batch, the variance at base_batch, as core::NoiseState expects, so
// noise_scale = base_batch·grad_var/grad_sqr = tr(Σ₁)/|G|^2 in samples.
//
// With one replica and no accumulation (count = 1) the hooks pair consecutive steps instead
// (count = 2, g_{t−1} and g_t); the gradients come from different parameters, so the estimate is
// biased and flagged as such (Sample::biased).
//
// Smoothing. One step's |G|^2 estimate is noisy: with count gradients its standard deviation is
// of the order of tr(Σ₁)/micro_batch·sqrt(2/(count−1)), which for 2 replicas is many times |G|^2
// itself. The averages are exponentially weighted with a decay chosen at every step so that their
// effective sample size n = (Σw)²/Σw² makes the relative standard error of both smoothed values
// sqrt(var/n)/mean (var: the per-step estimates' own variance, measured from the squared
// differences of consecutive steps' estimates by the same weights, so that a change of the true
// value does not pass for noise and lengthen the window) equal
// to target_error, within [min_window, max_window] steps. So the window is as short as the noise
// allows (a change of the true noise is followed as fast as it can be told from noise: about 1.15
// windows to 90 % of a step change) and no longer than max_window. The state reports the window
// and the resulting standard error of log(noise scale), which the efficiency model's uncertainty
// carries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "estimator/core/types.h"

namespace cloudtune::hooks {

struct GnsOptions {
  // Relative standard error the smoothed |G|^2 and tr(Σ) aim for (> 0). 0.05: the noise scale, a
  // ratio of the two, then carries about 7 % sampling error, and goodput depends on it
  // sub-linearly (gain = (φ + B0)/(φ/s + B0)), so a recommendation does not move on it.
  double target_error = 0.05;
  // Longest effective window, in steps (>= min_window): how stale the estimate may get when the
  // per-step noise would ask for more. A run's noise scale grows over thousands of steps (by 10x
  // and more over a training run, McCandlish et al. 2018), so 1,000 steps still follows it.
  double max_window = 1000;
  // Shortest effective window, in steps (>= 2): the per-step variance measured from fewer steps is
  // too unreliable to shorten the window further.
  double min_window = 8;
  // B0, the batch (samples) grad_var is normalised to; <= 0 = the global batch of the first
  // step folded in.
  double base_batch = 0;
  bool IsValid(std::string* error) const;
};

// What the hooks measured in one optimizer step.
struct GnsSample {
  double local_sqr = 0;    // mean over the count micro-batch gradients of |g_k|^2
  double total_sqr = 0;    // |ḡ|^2 of their average
  int count = 1;           // number of micro-batch gradients averaged (replicas x micro-steps)
  double micro_batch = 1;  // samples in each micro-batch gradient (the mean when they differ)
  bool biased = false;     // consecutive-steps pairing of a single replica
  // Unequal batches (replicas with different local batches): 0 = every gradient has micro_batch
  // samples. Otherwise, with g_k of b_k samples combined as ḡ = Σ w_k g_k (Σ w_k = 1):
  //   mean_inv_batch     = (1/count) Σ 1/b_k      (E local_sqr = |G|^2 + tr(Σ₁)·mean_inv_batch)
  //   combined_inv_batch = Σ w_k²/b_k             (E total_sqr = |G|^2 + tr(Σ₁)·combined_inv_batch)
  // and the estimates solve these two equations (SetUnequalBatches fills them).
  double mean_inv_batch = 0;
  double combined_inv_batch = 0;
};

// Fills count, micro_batch (the mean), mean_inv_batch and combined_inv_batch for gradients of
// `batches` samples each, combined weighted by their samples (w_k = b_k/B, the gradient of the
// whole batch: sample_weighted) or equally (w_k = 1/count, an unweighted all-reduce average).
void SetUnequalBatches(const std::vector<double>& batches, bool sample_weighted, GnsSample* s);

// Smoothed state: the noise state the models read (core::NoiseState: grad_sqr, grad_var at
// base_batch, base_batch, biased) plus the estimator's counters.
struct GnsState : core::NoiseState {
  bool valid = false;   // at least one step folded in
  int64_t steps = 0;    // steps folded in
  int64_t skipped = 0;  // steps skipped: non-finite inputs or count < 2
  double window = 0;    // effective sample size (steps) of the smoothed values
  // (NoiseState::log_sigma: the standard error of log(noise scale) from the window's sampling
  // noise.)
  // φ = B0·grad_var/grad_sqr in samples; +inf when grad_sqr <= 0, NaN before the first step.
  double noise_scale() const;
};

class GnsEstimator {
 public:
  explicit GnsEstimator(GnsOptions options = {});
  // Folds one step in. Returns false (and counts it in skipped) when an input is not finite, or
  // count < 2, or micro_batch <= 0: nothing is folded in then.
  bool Update(const GnsSample& s);
  // Raw (unsmoothed) estimates of one sample: |G|^2 and per-sample tr(Σ₁). False if unusable.
  static bool Estimate(const GnsSample& s, double* grad_sqr, double* var_per_sample);
  GnsState State() const;
  void Reset();

 private:
  GnsOptions opt_;
  double base_batch_ = 0;
  // Weighted sums of the per-step |G|^2 and tr(Σ₁), and of half the squared differences of
  // consecutive steps' (their variance); w_ = Σw, w2_ = Σw², wd_ = Σw of the differences.
  double sqr_ = 0, var_ = 0, sqr2_ = 0, var2_ = 0, w_ = 0, w2_ = 0, wd_ = 0;
  double last_sqr_ = 0, last_var_ = 0;
  double window_ = 0;  // effective sample size the next step's decay aims for
  bool biased_ = false;
  int64_t steps_ = 0, skipped_ = 0;
};

}  // namespace cloudtune::hooks
