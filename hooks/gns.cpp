#include "hooks/gns.h"

#include <cmath>
#include <limits>
#include <string>

namespace cloudtune::hooks {

bool GnsOptions::IsValid(std::string* error) const {
  if (!(ema >= 0 && ema < 1)) {
    if (error) *error = "GnsOptions::ema must be in [0, 1), got " + std::to_string(ema);
    return false;
  }
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
  sqr_ema_ = var_ema_ = weight_ = 0;
  biased_ = false;
  steps_ = skipped_ = 0;
}

bool GnsEstimator::Estimate(const GnsSample& s, double* grad_sqr, double* var_per_sample) {
  if (!std::isfinite(s.local_sqr) || !std::isfinite(s.total_sqr) || s.count < 2 ||
      !(s.micro_batch > 0) || !std::isfinite(s.micro_batch))
    return false;
  const double n = s.count;
  *grad_sqr = (n * s.total_sqr - s.local_sqr) / (n - 1);
  *var_per_sample = (s.local_sqr - s.total_sqr) * s.micro_batch * n / (n - 1);
  return std::isfinite(*grad_sqr) && std::isfinite(*var_per_sample);
}

bool GnsEstimator::Update(const GnsSample& s) {
  double g = 0, v = 0;
  if (!Estimate(s, &g, &v)) {
    ++skipped_;
    return false;
  }
  if (base_batch_ <= 0) base_batch_ = s.micro_batch * s.count / (s.biased ? 2 : 1);
  const double a = opt_.ema;
  sqr_ema_ = a * sqr_ema_ + (1 - a) * g;
  var_ema_ = a * var_ema_ + (1 - a) * v;
  weight_ = a * weight_ + (1 - a);
  biased_ = s.biased;
  ++steps_;
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
    st.grad_sqr = sqr_ema_ / weight_;
    st.grad_var = var_ema_ / weight_ / st.base_batch;
  }
  return st;
}

}  // namespace cloudtune::hooks
