#include "hooks/gns.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace cloudtune::hooks {

bool GnsOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = "GnsOptions::" + m;
    return false;
  };
  if (!(target_error > 0) || !std::isfinite(target_error))
    return fail("target_error must be > 0, got " + std::to_string(target_error));
  if (!(min_window >= 2) || !std::isfinite(min_window))
    return fail("min_window must be >= 2 (steps), got " + std::to_string(min_window));
  if (!(max_window >= min_window) || !std::isfinite(max_window))
    return fail("max_window must be >= min_window (steps), got " + std::to_string(max_window));
  if (!std::isfinite(base_batch)) {
    if (error) *error = "GnsOptions::base_batch must be finite";
    return false;
  }
  return true;
}

double GnsState::noise_scale() const {
  if (!valid) return std::numeric_limits<double>::quiet_NaN();
  if (grad_sqr <= 0) return std::numeric_limits<double>::infinity();
  return base_batch * grad_var / grad_sqr;
}

GnsEstimator::GnsEstimator(GnsOptions options) : opt_(options) { Reset(); }

void GnsEstimator::Reset() {
  base_batch_ = opt_.base_batch;
  sqr_ = var_ = sqr2_ = var2_ = w_ = w2_ = wd_ = 0;
  last_sqr_ = last_var_ = 0;
  window_ = opt_.min_window;
  biased_ = false;
  steps_ = skipped_ = 0;
}

bool GnsEstimator::Estimate(const GnsSample& s, double* grad_sqr, double* var_per_sample) {
  if (!std::isfinite(s.local_sqr) || !std::isfinite(s.total_sqr) || s.count < 2 ||
      !(s.micro_batch > 0) || !std::isfinite(s.micro_batch))
    return false;
  if (s.mean_inv_batch != 0 || s.combined_inv_batch != 0) {
    // E local = |G|^2 + tr·a_l, E total = |G|^2 + tr·a_t: two linear equations, unbiased.
    const double al = s.mean_inv_batch, at = s.combined_inv_batch;
    if (!(al > at) || !(at > 0) || !std::isfinite(al)) return false;
    *var_per_sample = (s.local_sqr - s.total_sqr) / (al - at);
    *grad_sqr = s.total_sqr - *var_per_sample * at;
    return std::isfinite(*grad_sqr) && std::isfinite(*var_per_sample);
  }
  const double n = s.count;
  *grad_sqr = (n * s.total_sqr - s.local_sqr) / (n - 1);
  *var_per_sample = (s.local_sqr - s.total_sqr) * s.micro_batch * n / (n - 1);
  return std::isfinite(*grad_sqr) && std::isfinite(*var_per_sample);
}

void SetUnequalBatches(const std::vector<double>& batches, bool sample_weighted, GnsSample* s) {
  const double n = static_cast<double>(batches.size());
  double total = 0, inv = 0;
  for (double b : batches) total += b, inv += 1 / b;
  s->count = static_cast<int>(batches.size());
  s->micro_batch = n > 0 ? total / n : 0;
  s->mean_inv_batch = n > 0 ? inv / n : 0;
  // Σ (b_k/B)²/b_k = 1/B; Σ (1/n)²/b_k = inv/n².
  s->combined_inv_batch = n > 0 ? (sample_weighted ? 1 / total : inv / (n * n)) : 0;
}

bool GnsEstimator::Update(const GnsSample& s) {
  double g = 0, v = 0;
  if (!Estimate(s, &g, &v)) {
    ++skipped_;
    return false;
  }
  if (base_batch_ <= 0) base_batch_ = s.micro_batch * s.count / (s.biased ? 2 : 1);
  // The decay of a stationary EMA whose effective sample size (1 + a)/(1 − a) is the window; a
  // plain mean (a = n/(n + 1)) until that many steps are in.
  const double n = static_cast<double>(steps_);
  const double a = std::min((window_ - 1) / (window_ + 1), n / (n + 1));
  const double b = 1 - a;
  sqr_ = a * sqr_ + b * g;
  var_ = a * var_ + b * v;
  if (steps_ > 0) {
    const double n1 = static_cast<double>(steps_ - 1);
    const double ad = std::min(a, n1 / (n1 + 1)), bd = 1 - ad;
    sqr2_ = ad * sqr2_ + bd * 0.5 * (g - last_sqr_) * (g - last_sqr_);
    var2_ = ad * var2_ + bd * 0.5 * (v - last_var_) * (v - last_var_);
    wd_ = ad * wd_ + bd;
  }
  last_sqr_ = g;
  last_var_ = v;
  w_ = a * w_ + b;
  w2_ = a * a * w2_ + b * b;
  biased_ = s.biased;
  ++steps_;
  // The window that brings the relative standard error of both means to the target.
  double need = opt_.min_window;
  if (wd_ > 0)
    for (const auto& [sum, sum2] : {std::pair<double, double>{sqr_, sqr2_}, {var_, var2_}}) {
      const double mean = sum / w_, var = sum2 / wd_;
      need = mean > 0 ? std::max(need, var / (opt_.target_error * opt_.target_error * mean * mean))
                      : opt_.max_window;
    }
  window_ = std::clamp(need, opt_.min_window, opt_.max_window);
  return true;
}

GnsState GnsEstimator::State() const {
  GnsState st;
  st.steps = steps_;
  st.skipped = skipped_;
  st.biased = biased_;
  st.base_batch = base_batch_ > 0 ? base_batch_ : 1;
  st.valid = steps_ > 0;
  if (st.valid) {
    st.grad_sqr = sqr_ / w_;
    st.grad_var = var_ / w_ / st.base_batch;
    st.window = w_ * w_ / w2_;
    // Standard error of log(mean) of each, by the delta method; log(φ) = log(tr) − log(|G|²).
    double v2 = 0;
    for (const auto& [sum, sum2] : {std::pair<double, double>{sqr_, sqr2_}, {var_, var2_}}) {
      const double mean = sum / w_, var = wd_ > 0 ? sum2 / wd_ : 0;
      v2 += mean > 0 ? var / (st.window * mean * mean) : 1.0;
    }
    // One step tells nothing of its own scatter: a factor e until a second one is in.
    st.log_sigma = wd_ > 0 ? std::min(std::sqrt(v2), 10.0) : 1.0;
  }
  return st;
}

}  // namespace cloudtune::hooks
