// The residual blocks of the throughput fit (estimator/throughput_fit.cpp): the log(step time) of
// the configurations of one placement, the mean log(compute time) of one batch size, and the
// priors on the core and on the effects; plus the solver's cost-change stop.
#pragma once

#include <ceres/ceres.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "estimator/detail/throughput_form.h"

namespace cloudtune::estimator::detail {

// A residual block holds the rows of one placement at up to kMaxSlots batch sizes (each has its
// own parameter block, so more would mostly add zeros to the Jacobian), at most kMaxGroup rows.
constexpr int kMaxSlots = 4;
constexpr int kMaxGroup = 32;

// One configuration as the fit sees it.
struct Row {
  int nodes = 1, replicas = 1, accum = 0;
  double b = 1;
  double log_step = 0;
  int batch = 0;  // index into the batch sizes
  int slot = 0;   // index of its batch block among its group's
};

// exp() of the core's log parameters and the batch term of each batch size, recomputed only when
// the core changes (Ceres evaluates all residual blocks at one point in turn; single-threaded).
struct CoreCache {
  double key[kC] = {};
  bool valid = false;
  double exp_alpha_c = 0, exp_beta_c = 0, exp_alpha_l = 0, exp_beta_l = 0, exp_alpha_n = 0,
         exp_beta_n = 0, exp_delta_n = 0;
  // Per batch size k: b and log(b / b_ref) (set once); bk = beta_c * b * (b/b_ref)^(kappa-1) and
  // tc0 = alpha_c + bk, the compute time before effects and contention, and its log.
  std::vector<double> b, log_b_rel, bk, tc0, log_tc0;
  double log_omega = 0;
  // Per batch size k: exp() of its block (batch effect, sync_batch effect), recomputed only when
  // the block's values change.
  std::vector<std::array<double, 4>> batch_exp;  // {effect, sync effect, exp(.), exp(.)}

  const double* BatchExp(int k, const double* block) {
    auto& e = batch_exp[k];
    if (e[0] != block[0] || e[1] != block[1]) {
      e = {block[0], block[1], std::exp(block[0]), std::exp(block[1])};
    }
    return e.data() + 2;
  }

  const CoreCache& Update(const double* th) {
    if (valid && std::equal(th, th + kC, key)) return *this;
    std::copy(th, th + kC, key);
    valid = true;
    exp_alpha_c = std::exp(th[kAlphaC]);
    exp_beta_c = std::exp(th[kBetaC]);
    exp_alpha_l = std::exp(th[kAlphaL]);
    exp_beta_l = std::exp(th[kBetaL]);
    exp_alpha_n = std::exp(th[kAlphaN]);
    exp_beta_n = std::exp(th[kBetaN]);
    exp_delta_n = std::exp(th[kDeltaN]);
    for (size_t k = 0; k < b.size(); ++k) {
      bk[k] = exp_beta_c * b[k] * std::exp((th[kKappa] - 1.0) * log_b_rel[k]);
      tc0[k] = exp_alpha_c + bk[k];
      log_tc0[k] = std::log(tc0[k]);
    }
    log_omega = std::log(th[kOmega]);
    return *this;
  }
};

// Huber in residual form: returns psi(r) with psi^2/2 = huber(r), and d psi / d r. Applied inside
// the cost functions so that the information matrix of the uncertainty step sees it too.
inline double Robust(double r, double k, double* slope) {
  const double a = std::abs(r);
  if (k <= 0 || a <= k) {
    *slope = 1;
    return r;
  }
  const double v = std::sqrt(2.0 * k * a - k * k);
  *slope = k / v;
  return r > 0 ? v : -v;
}

// log(step time) of the configurations of one placement (num_nodes, num_replicas), one residual
// each, in units of obs_sigma, robustified. Parameter blocks: the core; the node effect (N >= 2,
// R >= 2); the placement's block (compute effect[, placement effect]); then one block per distinct
// batch size of the group (batch effect, sync_batch effect). Every group touches exactly one
// placement block (the structure Ceres' Schur solvers eliminate), and the Jacobian has at most
// kC + 3 + 2 * kMaxSlots entries per row.
// Analytic derivatives (Times() is the reference; tests check the fit against known truth).
class GroupCost final : public ceres::CostFunction {
 public:
  // `rows`: `count` rows of one placement, sorted by batch size, spanning `slots` batch sizes;
  // their `slot` set. `rows` and `cache` must outlive the cost.
  GroupCost(const Row* rows, int count, int slots, double inv_sigma, double huber_k,
            CoreCache* cache)
      : rows_(rows),
        count_(count),
        slots_(slots),
        has_node_(rows[0].nodes >= 2 && rows[0].replicas >= 2),
        inv_sigma_(inv_sigma),
        huber_k_(huber_k),
        cache_(cache) {
    set_num_residuals(count);
    auto* sizes = mutable_parameter_block_sizes();
    sizes->push_back(kC);
    if (has_node_) sizes->push_back(1);
    sizes->push_back(has_node_ ? 2 : 1);
    for (int k = 0; k < slots; ++k) sizes->push_back(2);
  }
  const Row* rows() const { return rows_; }
  int count() const { return count_; }
  // When set, Evaluate also writes each row's fitted log(step time) there (fit statistics).
  void set_log_step_out(double* out) { log_step_out_ = out; }
  int slots() const { return slots_; }
  bool has_node() const { return has_node_; }

  bool Evaluate(double const* const* p, double* residuals, double** jacobians) const override;

 private:
  const Row* rows_;
  int count_, slots_;
  bool has_node_;
  double inv_sigma_, huber_k_;
  CoreCache* cache_;
  double* log_step_out_ = nullptr;
};

// Mean log(compute time per micro-step) of the configurations at one batch size, weighted by
// sqrt(count * compute_weight), robustified. Parameter blocks: core, that batch size's block
// (batch effect, sync_batch effect).
class ComputeCost final : public ceres::CostFunction {
 public:
  struct Item {
    int batch;  // index into the batch sizes
    double target, scale;
    double mean_g1;  // mean (GPUs per machine - 1) of the configurations averaged
  };
  ComputeCost(const Item& item, double huber_k, CoreCache* cache)
      : item_(item), huber_k_(huber_k), cache_(cache) {
    set_num_residuals(1);
    mutable_parameter_block_sizes()->push_back(kC);
    mutable_parameter_block_sizes()->push_back(2);
  }
  int batch() const { return item_.batch; }
  bool Evaluate(double const* const* p, double* residuals, double** jacobians) const override;

 private:
  Item item_;
  double huber_k_;
  CoreCache* cache_;
};

// Zero-mean priors on one parameter block of effects (size 1 or 2), one sigma per component.
class EffectPrior final : public ceres::CostFunction {
 public:
  EffectPrior(double sigma0, double sigma1, int size) : inv_{1.0 / sigma0, 1.0 / sigma1} {
    set_num_residuals(size);
    mutable_parameter_block_sizes()->push_back(size);
  }
  bool Evaluate(double const* const* p, double* r, double** j) const override;
  double inv(int i) const { return inv_[i]; }

 private:
  double inv_[2];
};

// Weak log-normal priors on the core, some linking parameters to each other so that a parameter
// without data follows the ones that have it (e.g. one machine's all-reduce ~ a quarter of the
// network's).
struct Prior {
  int a, b;  // residual = (theta[a] - theta[b] - mean) / sigma; b < 0: absolute
  double mean, sigma;
};

struct PriorCost {
  std::vector<Prior> priors;
  template <typename T>
  bool operator()(const T* th, T* res) const {
    for (size_t i = 0; i < priors.size(); ++i) {
      const Prior& p = priors[i];
      T v = th[p.a];
      if (p.b >= 0) v = v - th[p.b];
      res[i] = (v - p.mean) / p.sigma;
    }
    return true;
  }
};

// Stops the solver once a step lowers the cost by less than `tolerance` (absolute). The cost is
// half the chi-square, so 0.01 is far below what moves a parameter by a noticeable fraction of its
// standard deviation, while sloppy directions (a parameter at a bound, a vanishing term) would
// otherwise crawl on for dozens of iterations. Never right after a rejected step: the trust region
// is then small and a small decrease says nothing. (Extrapolating the last two decreases stopped
// too early where fast convergence turns slow.)
class CostChangeStop final : public ceres::IterationCallback {
 public:
  explicit CostChangeStop(double tolerance) : tolerance_(tolerance) {}
  ceres::CallbackReturnType operator()(const ceres::IterationSummary& it) override;

 private:
  double tolerance_;
  bool after_rejection_ = false;
};

}  // namespace cloudtune::estimator::detail
