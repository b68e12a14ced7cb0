#include "estimator/detail/throughput_residuals.h"

namespace cloudtune::estimator::detail {

bool GroupCost::Evaluate(double const* const* p, double* residuals, double** jacobians) const {
  const double* th = p[0];
  const CoreCache& c = cache_->Update(th);
  const int q_place = has_node_ ? 2 : 1, q_slot = q_place + 1;
  const Row& r0 = rows_[0];
  const double net0 = (has_node_ ? p[1][0] + p[q_place][1] : 0.0);
  const double comp0 = p[q_place][0];
  const double g1 = double(r0.replicas) / r0.nodes - 1.0;
  // The all-reduce time of this placement before the batch-size effect, and d/d theta.
  double tn0 = 0, d_tn0[kC] = {};
  if (r0.replicas >= 2) {
    const double en = std::exp(net0);
    if (r0.nodes <= 1) {
      const double bl = c.exp_beta_l * (r0.replicas - 2);
      tn0 = (c.exp_alpha_l + bl) * en;
      d_tn0[kAlphaL] = c.exp_alpha_l * en;
      d_tn0[kBetaL] = bl * en;
    } else {
      const double g = double(r0.replicas) / r0.nodes;
      const double bn = c.exp_beta_n * RGrowth(r0.replicas);
      const double dn = c.exp_delta_n * (g - 1.0) / (r0.nodes - 1);
      tn0 = (c.exp_alpha_n + bn + dn) * en;
      d_tn0[kAlphaN] = c.exp_alpha_n * en;
      d_tn0[kBetaN] = bn * en;
      d_tn0[kDeltaN] = dn * en;
    }
  }
  const double log_tn0 = tn0 > 0 ? std::log(tn0) : 0.0;
  if (jacobians)
    for (int k = q_slot; k < q_slot + slots_; ++k)
      if (jacobians[k]) std::fill(jacobians[k], jacobians[k] + 2 * count_, 0.0);
  const double gamma = th[kGamma], omega = th[kOmega];
  const double comp_g = comp0 + th[kZetaC] * g1, exp_comp_g = std::exp(comp_g);
  // Per configuration (rows of one batch size differ only in their accumulation steps, and are
  // adjacent): compute time, all-reduce time, overlapped time T and its log-derivatives.
  double tc = 0, tn = 0, t = 0, dlogt_dlogtc = 1, dlogt_dlogtn = 0, dlogt_dgamma = 0,
         dlogt_domega = 0;
  for (int i = 0; i < count_; ++i) {
    const Row& r = rows_[i];
    if (i == 0 || r.batch != rows_[i - 1].batch) {
      const double* bs = p[q_slot + r.slot];  // (batch effect, sync_batch effect)
      const double* eb = cache_->BatchExp(r.batch, bs);
      const double log_tc = c.log_tc0[r.batch] + comp_g + bs[0];
      tc = c.tc0[r.batch] * exp_comp_g * eb[0];
      tn = 0, t = tc, dlogt_dlogtc = 1, dlogt_dlogtn = 0, dlogt_dgamma = 0, dlogt_domega = 0;
      if (r.replicas >= 2) {
        tn = tn0 * eb[1];
        // T = tc + tn - m, m = softmin(a, tn), a = omega tc:
        // log m = log a - softplus(u) / gamma, u = gamma * log(a / tn).
        const double la = c.log_omega + log_tc;
        const double lr = la - log_tn0 - bs[1];  // log(a / tn)
        const double u = gamma * lr;
        const double eu = std::exp(-std::abs(u));
        const double sp = std::max(u, 0.0) + std::log1p(eu);
        const double sig = u > 0 ? 1.0 / (1.0 + eu) : eu / (1.0 + eu);
        const double mm = std::exp(la - sp / gamma);
        t = tc + tn - mm;
        dlogt_dlogtc = (tc - mm * (1.0 - sig)) / t;
        dlogt_dlogtn = (tn - mm * sig) / t;
        dlogt_dgamma = -mm * (sp / (gamma * gamma) - sig * lr / gamma) / t;
        dlogt_domega = -mm * (1.0 - sig) / (omega * t);
      }
    }
    // step = accum * tc + T;  w = T / step (1 without accumulation).
    const double step = r.accum * tc + t, log_step = std::log(step);
    const double w = t / step;
    if (log_step_out_) log_step_out_[i] = log_step;
    double slope;
    residuals[i] = Robust((log_step - r.log_step) * inv_sigma_, huber_k_, &slope);
    if (!std::isfinite(residuals[i])) return false;
    if (!jacobians) continue;
    // d log(step) = (1 - w) dlog tc + w (dlogt_dlogtc dlog tc + dlogt_dlogtn dlog tn + ... dg)
    const double k = slope * inv_sigma_;
    const double ktc = k * ((1.0 - w) + w * dlogt_dlogtc);   // per unit of log tc
    const double ktn = tn > 0 ? k * w * dlogt_dlogtn : 0.0;  // per unit of log tn
    if (double* j = jacobians[0] ? jacobians[0] + i * kC : nullptr) {
      for (int q = 0; q < kC; ++q) j[q] = tn0 > 0 ? ktn * d_tn0[q] / tn0 : 0.0;
      j[kAlphaC] = ktc * c.exp_alpha_c / c.tc0[r.batch];
      j[kBetaC] = ktc * c.bk[r.batch] / c.tc0[r.batch];
      j[kKappa] = j[kBetaC] * c.log_b_rel[r.batch];
      j[kGamma] = k * w * dlogt_dgamma;
      j[kOmega] = k * w * dlogt_domega;
      j[kZetaC] = ktc * g1;
    }
    if (has_node_ && jacobians[1]) jacobians[1][i] = ktn;
    if (double* j = jacobians[q_place]) {
      if (has_node_) {
        j[2 * i] = ktc;
        j[2 * i + 1] = ktn;
      } else {
        j[i] = ktc;
      }
    }
    if (double* j = jacobians[q_slot + r.slot]) {
      j[2 * i] = ktc;
      j[2 * i + 1] = ktn;
    }
  }
  return true;
}

bool ComputeCost::Evaluate(double const* const* p, double* residuals, double** jacobians) const {
  const double* th = p[0];
  const CoreCache& c = cache_->Update(th);
  const int k = item_.batch;
  const double log_tc = c.log_tc0[k] + p[1][0] + th[kZetaC] * item_.mean_g1;
  double slope;
  residuals[0] = Robust((log_tc - item_.target) * item_.scale, huber_k_, &slope);
  if (!std::isfinite(residuals[0])) return false;
  if (!jacobians) return true;
  const double s = slope * item_.scale;
  if (double* j = jacobians[0]) {
    std::fill(j, j + kC, 0.0);
    j[kAlphaC] = s * c.exp_alpha_c / c.tc0[k];
    j[kBetaC] = s * c.bk[k] / c.tc0[k];
    j[kKappa] = j[kBetaC] * c.log_b_rel[k];
    j[kZetaC] = s * item_.mean_g1;
  }
  if (jacobians[1]) jacobians[1][0] = s, jacobians[1][1] = 0;
  return true;
}

bool EffectPrior::Evaluate(double const* const* p, double* r, double** j) const {
  const int n = num_residuals();
  for (int i = 0; i < n; ++i) r[i] = p[0][i] * inv_[i];
  if (j && j[0]) {
    std::fill(j[0], j[0] + n * n, 0.0);
    for (int i = 0; i < n; ++i) j[0][i * n + i] = inv_[i];
  }
  return true;
}

ceres::CallbackReturnType CostChangeStop::operator()(const ceres::IterationSummary& it) {
  const bool stop =
      it.iteration > 0 && it.step_is_successful && !after_rejection_ && it.cost_change < tolerance_;
  after_rejection_ = it.iteration > 0 && !it.step_is_successful;
  return stop ? ceres::SOLVER_TERMINATE_SUCCESSFULLY : ceres::SOLVER_CONTINUE;
}

}  // namespace cloudtune::estimator::detail
