// Gradient noise scale estimator (DESIGN §4). Plain C++ (no torch): the hooks feed it two scalars
// per optimizer step and it keeps bias-corrected exponential moving averages.
//
// Per step, with `count` micro-batch gradients g_k of `micro_batch` samples each (count = replicas
// x accumulation micro-steps) and their average ḡ:
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
#pragma once

#include <cstdint>
#include <string>

#include "estimator/core/types.h"

namespace cloudtune::hooks {

struct GnsOptions {
  // EMA decay per step, in [0, 1): weight of the past. 0 = no smoothing.
  double ema = 0.95;
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
  double micro_batch = 1;  // samples in each micro-batch gradient
  bool biased = false;     // consecutive-steps pairing of a single replica
};

// Smoothed state: the noise state the models read (core::NoiseState: grad_sqr, grad_var at
// base_batch, base_batch, biased) plus the estimator's counters.
struct GnsState : core::NoiseState {
  bool valid = false;   // at least one step folded in
  int64_t steps = 0;    // steps folded in
  int64_t skipped = 0;  // steps skipped: non-finite inputs or count < 2
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
  double sqr_ema_ = 0, var_ema_ = 0, weight_ = 0;  // weight_ = 1 − ema^n, the bias correction
  bool biased_ = false;
  int64_t steps_ = 0, skipped_ = 0;
};

}  // namespace cloudtune::hooks
