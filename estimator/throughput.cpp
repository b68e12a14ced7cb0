#include "estimator/throughput.h"

#include <ceres/ceres.h>

#include <Eigen/Dense>
#include <Eigen/SparseCholesky>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <tuple>

#include "estimator/detail/selected_inverse.h"
#include "estimator/detail/start.h"
#include "estimator/core/error.h"

namespace cloudtune::estimator {
namespace detail {
namespace {

constexpr int kC = kNumThroughputParams;  // core parameters
// A residual block holds the rows of one placement at up to kMaxSlots batch sizes (each has its
// own parameter block, so more would mostly add zeros to the Jacobian), at most kMaxGroup rows.
constexpr int kMaxSlots = 4;
constexpr int kMaxGroup = 32;
constexpr double kLogMin = -20.7;  // log(1e-9 s)
constexpr double kLogMax = 9.2;    // log(1e4 s)
constexpr double kKappaMin = 0.3, kKappaMax = 3.0;
constexpr double kGammaMin = 1.0, kGammaMax = 10.0;
constexpr double kOmegaMin = 0.05;
// Prior centres of the all-reduce parameters relative to alpha_n (alpha_l: one machine's; beta_l
// relative to alpha_l), and their log standard deviation. Typical of the fits to full traces of
// six models on one cluster (alpha_l/alpha_n 0.20-0.35, beta_n/alpha_n 0.15-0.87, delta_n/alpha_n
// 0.10-0.59, beta_l/alpha_l 0.07-1.8): they only matter when the data cannot identify a parameter.
constexpr double kAlphaLRatio = 0.25, kBetaNRatio = 0.35, kDeltaNRatio = 0.2, kBetaLRatio = 0.3;
constexpr double kRatioSigma = 1.0;
// Prior of omega, the fraction of compute an all-reduce can hide behind (backward ~ 2/3 of it).
constexpr double kOmegaPrior = 0.7, kOmegaSigma = 0.2;
constexpr double kEffectMax = 2.0;  // |log multiplier| of an effect

bool IsLogParam(int i) { return i != kKappa && i != kGamma && i != kZetaC && i != kOmega; }

inline double Scalar(double x) { return x; }
template <typename J>
inline double Scalar(const J& x) {
  return x.a;
}

// One configuration as the fit sees it.
struct Row {
  int nodes = 1, replicas = 1, accum = 0;
  double b = 1;
  double log_step = 0;
  int batch = 0;  // index into the batch sizes
  int slot = 0;   // index of its batch block among its group's
};

// Growth of the network all-reduce time with the number of replicas: log(R/2), the latency of a
// tree (or the chunk count of a pipelined ring); a linear (R - 2) term, as in Pollux, over-predicts
// large jobs.
inline double RGrowth(int r) { return std::log(r / 2.0); }

// The model: per micro-step compute time T_c and step time, given the core parameters, the log
// multiplier of this configuration's all-reduce time (net_eff: node + placement + sync_batch
// effects) and of its compute time (comp_eff: batch + compute effects).
template <typename T>
void Times(const T* th, const T& net_eff, const T& comp_eff, int nodes, int replicas, double b,
           double log_b_rel, int accum, T* tc_out, T* step_out) {
  using std::exp;
  using std::log;
  const double g1 = double(replicas) / double(std::max(1, nodes)) - 1.0;  // extra GPUs per machine
  T tc = (exp(th[kAlphaC]) + exp(th[kBetaC]) * b * exp((th[kKappa] - 1.0) * log_b_rel)) *
         exp(comp_eff + th[kZetaC] * g1);
  T t = tc;
  if (replicas >= 2) {
    T tn;
    if (nodes <= 1) {
      tn = (exp(th[kAlphaL]) + exp(th[kBetaL]) * double(replicas - 2)) * exp(net_eff);
    } else {
      const double g = double(replicas) / double(nodes);
      tn = (exp(th[kAlphaN]) + exp(th[kBetaN]) * RGrowth(replicas) +
            exp(th[kDeltaN]) * (g - 1.0) / double(nodes - 1)) *
           exp(net_eff);
    }
    // T = tc + tn - softmin(omega * tc, tn), softmin(a, b) = (a^-gamma + b^-gamma)^(-1/gamma)
    // = a * exp(-softplus(gamma * log(a / b)) / gamma), with a stable softplus.
    const T a = th[kOmega] * tc;
    const T u = th[kGamma] * log(a / tn);
    T sp;
    if (Scalar(u) > 30.0) {
      sp = u + log(1.0 + exp(-u));
    } else {
      sp = log(1.0 + exp(u));
    }
    t = tc + tn - a * exp(-sp / th[kGamma]);
  }
  *tc_out = tc;
  *step_out = double(accum) * tc + t;
}

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

  bool Evaluate(double const* const* p, double* residuals, double** jacobians) const override {
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
  bool Evaluate(double const* const* p, double* residuals, double** jacobians) const override {
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
  bool Evaluate(double const* const* p, double* r, double** j) const override {
    const int n = num_residuals();
    for (int i = 0; i < n; ++i) r[i] = p[0][i] * inv_[i];
    if (j && j[0]) {
      std::fill(j[0], j[0] + n * n, 0.0);
      for (int i = 0; i < n; ++i) j[0][i * n + i] = inv_[i];
    }
    return true;
  }
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
  ceres::CallbackReturnType operator()(const ceres::IterationSummary& it) override {
    const bool stop = it.iteration > 0 && it.step_is_successful && !after_rejection_ &&
                      it.cost_change < tolerance_;
    after_rejection_ = it.iteration > 0 && !it.step_is_successful;
    return stop ? ceres::SOLVER_TERMINATE_SUCCESSFULLY : ceres::SOLVER_CONTINUE;
  }

 private:
  double tolerance_;
  bool after_rejection_ = false;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t n = v.size();
  const auto mid = v.begin() + n / 2;
  std::nth_element(v.begin(), mid, v.end());
  return n % 2 ? *mid : 0.5 * (*std::max_element(v.begin(), mid) + *mid);
}

}  // namespace
}  // namespace detail

const char* ThroughputParamName(int i) {
  static const char* kNames[] = {"alpha_c", "beta_c",  "kappa", "alpha_l", "beta_l", "alpha_n",
                                 "beta_n",  "delta_n", "gamma", "zeta_c",  "omega"};
  return (i >= 0 && i < kNumThroughputParams) ? kNames[i] : "?";
}

const char* ThroughputParamUnit(int i) {
  static const char* kUnits[] = {"s", "s/sample", "1", "s", "s", "s", "s", "s", "1", "1", "1"};
  return (i >= 0 && i < kNumThroughputParams) ? kUnits[i] : "?";
}

bool ThroughputFitOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  auto positive = [](double x) { return x > 0 && std::isfinite(x); };
  if (!positive(obs_sigma)) return fail("obs_sigma must be > 0");
  if (!(huber_k >= 0) || !std::isfinite(huber_k)) return fail("huber_k must be >= 0");
  if (!(compute_weight >= 0) || !std::isfinite(compute_weight))
    return fail("compute_weight must be >= 0");
  if (!positive(node_effect_sigma)) return fail("node_effect_sigma must be > 0");
  if (!positive(placement_effect_sigma)) return fail("placement_effect_sigma must be > 0");
  if (!positive(batch_effect_sigma)) return fail("batch_effect_sigma must be > 0");
  if (!positive(compute_effect_sigma)) return fail("compute_effect_sigma must be > 0");
  if (!positive(sync_batch_effect_sigma)) return fail("sync_batch_effect_sigma must be > 0");
  if (!positive(prior_scale)) return fail("prior_scale must be > 0");
  if (!(identified_ratio > 0 && identified_ratio < 1))
    return fail("identified_ratio must be in (0, 1)");
  if (max_iterations < 1) return fail("max_iterations must be >= 1");
  if (!(function_tolerance > 0)) return fail("function_tolerance must be > 0");
  if (!(cost_tolerance >= 0) || !std::isfinite(cost_tolerance))
    return fail("cost_tolerance must be >= 0");
  return true;
}

double ThroughputModel::param(int i) const {
  const double t = theta_.at(i);
  return detail::IsLogParam(i) ? std::exp(t) : t;
}

double ThroughputModel::covariance(int i, int j) const {
  constexpr int kC = kNumThroughputParams;
  const int n = static_cast<int>(theta_.size());
  if (i < 0 || j < 0 || i >= n || j >= n) return 0;
  if (i > j) std::swap(i, j);
  if (j < kC) return cov_core_.empty() ? 0 : cov_core_[i * kC + j];
  if (i < kC) return cov_cross_.empty() ? 0 : cov_cross_[i * num_effects() + (j - kC)];
  const EffectPair key{i - kC, j - kC, 0};
  auto it = std::lower_bound(cov_pairs_.begin(), cov_pairs_.end(), key,
                             [](const EffectPair& x, const EffectPair& y) {
                               return std::tie(x.a, x.b) < std::tie(y.a, y.b);
                             });
  return it != cov_pairs_.end() && it->a == key.a && it->b == key.b ? it->v : 0;
}

double ThroughputModel::param_sigma(int i) const {
  const double v = covariance(i, i);
  return v > 0 ? std::sqrt(v) : 0;
}

namespace {
template <typename V, typename K>
int Find(const V& v, const K& key) {
  auto it = std::lower_bound(v.begin(), v.end(), key);
  return it == v.end() || *it != key ? -1 : static_cast<int>(it - v.begin());
}
}  // namespace

int ThroughputModel::NodeIndex(int num_nodes) const {
  const int k = Find(node_counts_, num_nodes);
  return k < 0 ? -1 : kNumThroughputParams + k;
}
int ThroughputModel::BatchIndex(int local_bsz) const {
  const int k = Find(batch_sizes_, local_bsz);
  return k < 0 ? -1 : kNumThroughputParams + static_cast<int>(node_counts_.size()) + 2 * k;
}
int ThroughputModel::SyncBatchIndex(int local_bsz) const {
  const int k = BatchIndex(local_bsz);
  return k < 0 ? -1 : k + 1;
}
int ThroughputModel::ComputeIndex(int num_nodes, int num_replicas) const {
  const int k = Find(compute_placements_, std::make_pair(num_nodes, num_replicas));
  return k < 0 ? -1 : block_offset_[k];
}
int ThroughputModel::PlaceIndex(int num_nodes, int num_replicas) const {
  if (num_nodes < 2 || num_replicas < 2) return -1;
  const int k = ComputeIndex(num_nodes, num_replicas);
  return k < 0 ? -1 : k + 1;
}

namespace {
// theta[i], or 0 for a value the fit did not see (index -1).
double EffectOrZero(const std::vector<double>& theta, int i) { return i < 0 ? 0 : theta[i]; }
}  // namespace

double ThroughputModel::node_effect(int num_nodes) const {
  return EffectOrZero(theta_, NodeIndex(num_nodes));
}
double ThroughputModel::placement_effect(int num_nodes, int num_replicas) const {
  return EffectOrZero(theta_, PlaceIndex(num_nodes, num_replicas));
}
double ThroughputModel::batch_effect(int local_bsz) const {
  return EffectOrZero(theta_, BatchIndex(local_bsz));
}
double ThroughputModel::compute_effect(int num_nodes, int num_replicas) const {
  return EffectOrZero(theta_, ComputeIndex(num_nodes, num_replicas));
}
double ThroughputModel::sync_batch_effect(int local_bsz) const {
  return EffectOrZero(theta_, SyncBatchIndex(local_bsz));
}

StepPrediction ThroughputModel::Predict(const ConfigKey& key, int gpus_per_node) const {
  constexpr int kC = kNumThroughputParams;
  using Jet = ceres::Jet<double, kC + 2>;  // core | all-reduce effects | compute effects
  int nodes = key.num_nodes;
  const int replicas = std::max(1, key.num_replicas);
  if (nodes < 1) nodes = gpus_per_node > 0 ? (replicas + gpus_per_node - 1) / gpus_per_node : 1;
  const double b = std::max(1, key.local_bsz);
  const int accum = std::max(0, key.accum_steps);
  const bool sync = replicas >= 2, net = sync && nodes >= 2;
  // The effects this configuration uses: (theta index or -1 if unseen, prior sigma, all-reduce?).
  struct Use {
    int index;
    double sigma;
    bool on_sync;
  };
  std::vector<Use> uses;
  if (net) {
    uses.push_back({NodeIndex(nodes), node_effect_sigma_, true});
    uses.push_back({PlaceIndex(nodes, replicas), placement_effect_sigma_, true});
  }
  if (sync) uses.push_back({SyncBatchIndex(static_cast<int>(b)), sync_batch_effect_sigma_, true});
  uses.push_back({BatchIndex(static_cast<int>(b)), batch_effect_sigma_, false});
  uses.push_back({ComputeIndex(nodes, replicas), compute_effect_sigma_, false});
  Jet th[kC];
  for (int i = 0; i < kC; ++i) th[i] = Jet(theta_[i], i);
  double net_eff = 0, comp_eff = 0;
  for (const Use& u : uses)
    if (u.index >= 0) (u.on_sync ? net_eff : comp_eff) += theta_[u.index];
  Jet tc, step;
  detail::Times(th, Jet(net_eff, kC), Jet(comp_eff, kC + 1), nodes, replicas, b,
                std::log(b / b_ref_), accum, &tc, &step);
  StepPrediction p;
  p.compute_time = tc.a;
  p.step_time = step.a;
  p.sync_time = std::max(0.0, step.a - (accum + 1) * tc.a);
  p.throughput = static_cast<double>(replicas) * b * (accum + 1) / step.a;
  // Delta method on log(step): g' C g over the parameters used, plus the prior variance of an
  // effect the fit did not see, plus the scatter of one measurement.
  std::vector<std::pair<int, double>> g;
  for (int i = 0; i < kC; ++i) g.emplace_back(i, step.v[i] / step.a);
  double var = noise_sigma_ * noise_sigma_;
  for (const Use& u : uses) {
    const double gu = step.v[u.on_sync ? kC : kC + 1] / step.a;
    if (u.index >= 0)
      g.emplace_back(u.index, gu);
    else
      var += gu * gu * u.sigma * u.sigma;
  }
  for (const auto& [i, gi] : g)
    for (const auto& [j, gj] : g) var += gi * covariance(i, j) * gj;
  p.log_sigma = std::sqrt(std::max(0.0, var));
  return p;
}

namespace {
constexpr const char* kSchema = "cloudtune.throughput_model/2";
}  // namespace

nlohmann::json ThroughputModel::ToJson() const {
  constexpr int kC = kNumThroughputParams;
  nlohmann::json j;
  j["schema"] = kSchema;
  j["model"] = {{"form",
                 "T_c = (alpha_c + beta_c*b*(b/b_ref)^(kappa-1))*exp(batch_effect[b] + "
                 "compute_effect[N,R] + zeta_c*(R/N-1)); "
                 "T_n = 0 (R=1), "
                 "(alpha_l + beta_l*(R-2))*exp(sync_batch_effect[b]) (N=1), (alpha_n + "
                 "beta_n*log(R/2) + delta_n*(R/N-1)/(N-1))*exp(node_effect[N] + "
                 "placement_effect[N,R] + sync_batch_effect[b]) (N>=2); "
                 "T = T_c + T_n - (a^-gamma + T_n^-gamma)^(-1/gamma), a = omega*T_c; "
                 "step = s*T_c + T (s = accum_steps)"},
                {"b_ref", b_ref_},
                {"noise_sigma", noise_sigma_},
                {"node_effect_sigma", node_effect_sigma_},
                {"placement_effect_sigma", placement_effect_sigma_},
                {"batch_effect_sigma", batch_effect_sigma_},
                {"compute_effect_sigma", compute_effect_sigma_},
                {"sync_batch_effect_sigma", sync_batch_effect_sigma_}};
  nlohmann::json ps = nlohmann::json::array();
  for (int i = 0; i < kC; ++i) {
    ps.push_back({{"name", ThroughputParamName(i)},
                  {"value", param(i)},
                  {"unit", ThroughputParamUnit(i)},
                  {"identified", static_cast<bool>(identified_[i])},
                  {"sigma", param_sigma(i)},
                  {"sigma_scale", detail::IsLogParam(i) ? "log" : "linear"}});
  }
  j["parameters"] = ps;
  auto effect = [&](int i, nlohmann::json o) {
    o["value"] = theta_[i];
    o["identified"] = static_cast<bool>(identified_[i]);
    o["sigma"] = param_sigma(i);
    return o;
  };
  // Effects are log multipliers: node, placement and sync_batch of T_n; batch and compute of T_c.
  nlohmann::json ne = nlohmann::json::array(), pe = nlohmann::json::array(),
                 be = nlohmann::json::array(), ce = nlohmann::json::array(),
                 se = nlohmann::json::array();
  for (int n : node_counts_) ne.push_back(effect(NodeIndex(n), {{"num_nodes", n}}));
  for (const auto& [nn, rr] : placements_)
    pe.push_back(effect(PlaceIndex(nn, rr), {{"num_nodes", nn}, {"num_replicas", rr}}));
  for (int b : batch_sizes_) be.push_back(effect(BatchIndex(b), {{"local_bsz", b}}));
  for (const auto& [nn, rr] : compute_placements_)
    ce.push_back(effect(ComputeIndex(nn, rr), {{"num_nodes", nn}, {"num_replicas", rr}}));
  for (int b : batch_sizes_) se.push_back(effect(SyncBatchIndex(b), {{"local_bsz", b}}));
  j["node_effects"] = ne;
  j["placement_effects"] = pe;
  j["batch_effects"] = be;
  j["compute_effects"] = ce;
  j["sync_batch_effects"] = se;
  // Posterior covariance of theta = [core (log or linear, as sigma_scale) | node effects | per
  // batch size: batch effect, sync_batch effect | per compute_effects entry: its compute effect,
  // then the placement effect of the same (num_nodes, num_replicas) if listed]: the core block,
  // the core x effect block and the effect pairs that share a measured configuration (others 0).
  const int ne_total = num_effects();
  nlohmann::json core = nlohmann::json::array(), cross = nlohmann::json::array(),
                 pairs = nlohmann::json::array();
  for (int r = 0; r < kC; ++r) {
    nlohmann::json row = nlohmann::json::array(), xrow = nlohmann::json::array();
    for (int c = 0; c < kC; ++c) row.push_back(covariance(r, c));
    for (int e = 0; e < ne_total; ++e) xrow.push_back(covariance(r, kC + e));
    core.push_back(row);
    cross.push_back(xrow);
  }
  for (const auto& p : cov_pairs_) pairs.push_back({p.a, p.b, p.v});
  j["covariance"] = {{"core", core}, {"core_effect", cross}, {"effect_pairs", pairs}};
  j["fit"] = {{"configurations", stats_.configurations},
              {"residuals", stats_.residuals},
              {"iterations", stats_.iterations},
              {"seconds", stats_.seconds},
              {"initial_cost", stats_.initial_cost},
              {"final_cost", stats_.final_cost},
              {"rms_log_step_residual", stats_.rms_log_step},
              {"mape_step", stats_.mape_step},
              {"max_ape_step", stats_.max_ape_step},
              {"termination", stats_.termination}};
  return j;
}

ThroughputModel ThroughputModel::FromJson(const nlohmann::json& j, const std::string& source) {
  constexpr int kC = kNumThroughputParams;
  auto fail = [&](const std::string& what) { throw InputError(source + ": " + what); };
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& where) {
    if (!o.contains(key)) fail(where + "." + key + ": missing");
    const auto& v = o[key];
    if (!v.is_number()) fail(where + "." + key + ": expected a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(where + "." + key + ": not finite");
    return d;
  };
  auto flag = [](const nlohmann::json& o) {
    return o.contains("identified") && o["identified"].is_boolean() && o["identified"].get<bool>();
  };
  if (!j.is_object()) fail("not a JSON object");
  if (!j.contains("schema") || !j["schema"].is_string())
    fail(std::string("missing \"schema\" (expected \"") + kSchema + "\")");
  if (j["schema"] != kSchema)
    fail("schema is \"" + j["schema"].get<std::string>() + "\", expected \"" + kSchema + "\"");
  ThroughputModel m;
  if (!j.contains("model") || !j["model"].is_object()) fail("missing object \"model\"");
  const auto& mo = j["model"];
  m.b_ref_ = number(mo, "b_ref", "model");
  if (!(m.b_ref_ > 0)) fail("model.b_ref: must be positive");
  m.noise_sigma_ = number(mo, "noise_sigma", "model");
  m.node_effect_sigma_ = number(mo, "node_effect_sigma", "model");
  m.placement_effect_sigma_ = number(mo, "placement_effect_sigma", "model");
  m.batch_effect_sigma_ = number(mo, "batch_effect_sigma", "model");
  m.compute_effect_sigma_ = number(mo, "compute_effect_sigma", "model");
  m.sync_batch_effect_sigma_ = number(mo, "sync_batch_effect_sigma", "model");
  for (double s : {m.noise_sigma_, m.node_effect_sigma_, m.placement_effect_sigma_,
                   m.batch_effect_sigma_, m.compute_effect_sigma_, m.sync_batch_effect_sigma_})
    if (s < 0) fail("model: sigmas must be >= 0");
  if (!j.contains("parameters") || !j["parameters"].is_array())
    fail("missing array \"parameters\"");
  std::vector<double> core(kC, 0);
  std::vector<bool> core_id(kC, false), seen(kC, false);
  const auto& ps = j["parameters"];
  for (size_t k = 0; k < ps.size(); ++k) {
    const std::string at = "parameters[" + std::to_string(k) + "]";
    const auto& p = ps[k];
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string())
      fail(at + ": expected an object with a \"name\"");
    const std::string name = p["name"];
    int i = 0;
    while (i < kC && name != ThroughputParamName(i)) ++i;
    if (i == kC) fail(at + ": unknown parameter \"" + name + "\"");
    const double v = number(p, "value", at + " (" + name + ")");
    if (detail::IsLogParam(i) && !(v > 0)) fail(at + " (" + name + ").value: must be positive");
    if (i == kGamma && v < 1) fail(at + " (gamma).value: must be >= 1");
    if (i == kOmega && !(v > 0 && v <= 1)) fail(at + " (omega).value: must be in (0, 1]");
    core[i] = detail::IsLogParam(i) ? std::log(v) : v;
    core_id[i] = flag(p);
    seen[i] = true;
  }
  for (int i = 0; i < kC; ++i)
    if (!seen[i]) fail(std::string("parameters: missing \"") + ThroughputParamName(i) + "\"");
  m.theta_ = core;
  m.identified_ = core_id;
  auto array = [&](const char* field) -> const nlohmann::json& {
    if (!j.contains(field) || !j[field].is_array())
      fail(std::string("missing array \"") + field + "\"");
    return j[field];
  };
  auto integer = [&](const nlohmann::json& o, const char* key, const std::string& at, int min) {
    const double x = number(o, key, at);
    if (x != std::floor(x) || x < min || x > 1e9)
      fail(at + "." + key + ": expected an integer >= " + std::to_string(min));
    return static_cast<int>(x);
  };
  // Effects keyed by one integer (node count, batch size), increasing.
  auto by_value = [&](const char* field, const char* key, std::vector<int>* values, int min,
                      std::vector<double>* out, std::vector<bool>* ids) {
    const auto& a = array(field);
    for (size_t k = 0; k < a.size(); ++k) {
      const std::string at = std::string(field) + "[" + std::to_string(k) + "]";
      if (!a[k].is_object()) fail(at + ": expected an object");
      const int x = integer(a[k], key, at, min);
      if (!values->empty() && x <= values->back()) fail(at + "." + key + ": must be increasing");
      values->push_back(x);
      out->push_back(number(a[k], "value", at));
      ids->push_back(flag(a[k]));
    }
  };
  // Effects keyed by (num_nodes, num_replicas), increasing.
  auto by_placement = [&](const char* field, std::vector<std::pair<int, int>>* values, int min,
                          std::vector<double>* out, std::vector<bool>* ids) {
    const auto& a = array(field);
    for (size_t k = 0; k < a.size(); ++k) {
      const std::string at = std::string(field) + "[" + std::to_string(k) + "]";
      if (!a[k].is_object()) fail(at + ": expected an object");
      const double nn = number(a[k], "num_nodes", at), rr = number(a[k], "num_replicas", at);
      if (nn != std::floor(nn) || rr != std::floor(rr) || nn < min || rr < nn || rr > 1e9)
        fail(at + ": expected integers " + std::to_string(min) + " <= num_nodes <= num_replicas");
      const std::pair<int, int> key(static_cast<int>(nn), static_cast<int>(rr));
      if (!values->empty() && !(values->back() < key))
        fail(at + ": placements must be sorted and distinct");
      values->push_back(key);
      out->push_back(number(a[k], "value", at));
      ids->push_back(flag(a[k]));
    }
  };
  std::vector<int> sync_sizes;
  std::vector<double> place_v, comp_v, batch_v, sync_v;
  std::vector<bool> place_id, comp_id, batch_id, sync_id;
  by_value("node_effects", "num_nodes", &m.node_counts_, 2, &m.theta_, &m.identified_);
  by_value("batch_effects", "local_bsz", &m.batch_sizes_, 1, &batch_v, &batch_id);
  by_value("sync_batch_effects", "local_bsz", &sync_sizes, 1, &sync_v, &sync_id);
  if (sync_sizes != m.batch_sizes_)
    fail("sync_batch_effects: expected the local_bsz values of batch_effects");
  for (size_t k = 0; k < batch_v.size(); ++k) {
    m.theta_.insert(m.theta_.end(), {batch_v[k], sync_v[k]});
    m.identified_.insert(m.identified_.end(), {batch_id[k], sync_id[k]});
  }
  by_placement("placement_effects", &m.placements_, 2, &place_v, &place_id);
  by_placement("compute_effects", &m.compute_placements_, 1, &comp_v, &comp_id);
  size_t next_place = 0;
  for (size_t k = 0; k < m.compute_placements_.size(); ++k) {
    const auto [nn, rr] = m.compute_placements_[k];
    m.block_offset_.push_back(static_cast<int>(m.theta_.size()));
    m.theta_.push_back(comp_v[k]);
    m.identified_.push_back(comp_id[k]);
    if (nn >= 2 && rr >= 2) {
      if (next_place >= m.placements_.size() ||
          m.placements_[next_place] != m.compute_placements_[k])
        fail(
            "placement_effects: expected one entry per compute_effects entry with num_nodes >= 2 "
            "and num_replicas >= 2");
      m.theta_.push_back(place_v[next_place]);
      m.identified_.push_back(place_id[next_place]);
      ++next_place;
    }
  }
  if (next_place != m.placements_.size())
    fail(
        "placement_effects: expected one entry per compute_effects entry with num_nodes >= 2 "
        "and num_replicas >= 2");
  const int ne = m.num_effects();
  if (!j.contains("covariance") || !j["covariance"].is_object())
    fail("missing object \"covariance\"");
  const auto& cov = j["covariance"];
  auto matrix = [&](const char* field, int cols, std::vector<double>* out) {
    const std::string dims = std::to_string(kC) + "x" + std::to_string(cols);
    if (!cov.contains(field) || !cov[field].is_array() || cov[field].size() != size_t(kC))
      fail(std::string("covariance.") + field + ": expected a " + dims + " array");
    out->assign(size_t(kC) * cols, 0);
    for (int r = 0; r < kC; ++r) {
      const auto& row = cov[field][r];
      const std::string at = std::string("covariance.") + field + "[" + std::to_string(r) + "]";
      if (!row.is_array() || row.size() != size_t(cols))
        fail(at + ": expected " + std::to_string(cols) + " numbers");
      for (int c = 0; c < cols; ++c) {
        if (!row[c].is_number() || !std::isfinite(row[c].get<double>()))
          fail(at + "[" + std::to_string(c) + "]: expected a finite number");
        (*out)[size_t(r) * cols + c] = row[c].get<double>();
      }
    }
  };
  matrix("core", kC, &m.cov_core_);
  matrix("core_effect", ne, &m.cov_cross_);
  if (!cov.contains("effect_pairs") || !cov["effect_pairs"].is_array())
    fail("covariance.effect_pairs: expected an array of [a, b, value]");
  for (size_t k = 0; k < cov["effect_pairs"].size(); ++k) {
    const auto& e = cov["effect_pairs"][k];
    const std::string at = "covariance.effect_pairs[" + std::to_string(k) + "]";
    if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        !e[2].is_number() || !std::isfinite(e[2].get<double>()))
      fail(at + ": expected [a, b, value] with integer effect indices");
    const int a = e[0].get<int>(), b = e[1].get<int>();
    if (a < 0 || b < a || b >= ne) fail(at + ": expected 0 <= a <= b < " + std::to_string(ne));
    if (!m.cov_pairs_.empty() &&
        std::tie(m.cov_pairs_.back().a, m.cov_pairs_.back().b) >= std::tie(a, b))
      fail(at + ": pairs must be sorted and distinct");
    m.cov_pairs_.push_back({a, b, e[2].get<double>()});
  }
  if (j.contains("fit") && j["fit"].is_object()) {
    const auto& f = j["fit"];
    auto get = [&](const char* k, auto* out) {
      if (f.contains(k) && f[k].is_number()) *out = f[k].get<std::decay_t<decltype(*out)>>();
    };
    get("configurations", &m.stats_.configurations);
    get("residuals", &m.stats_.residuals);
    get("iterations", &m.stats_.iterations);
    get("seconds", &m.stats_.seconds);
    get("initial_cost", &m.stats_.initial_cost);
    get("final_cost", &m.stats_.final_cost);
    get("rms_log_step_residual", &m.stats_.rms_log_step);
    get("mape_step", &m.stats_.mape_step);
    get("max_ape_step", &m.stats_.max_ape_step);
    if (f.contains("termination") && f["termination"].is_string())
      m.stats_.termination = f["termination"];
  }
  return m;
}

ThroughputModel FitThroughput(const std::vector<Measurement>& data,
                              const ThroughputFitOptions& options) {
  using namespace detail;
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  if (!options.IsValid(&err)) throw InputError("throughput fit options: " + err);
  if (data.empty()) throw InputError("throughput fit: no measurements");

  ThroughputModel m;
  // Distinct node counts and placements (N >= 2, with >= 2 replicas), batch sizes and placements
  // (any) get an effect each.
  double sum_lb = 0;
  for (const auto& d : data) {
    if (!(d.step_time > 0) || !std::isfinite(d.step_time))
      throw InputError("throughput fit: step_time must be positive");
    sum_lb += std::log(std::max(1, d.key.local_bsz));
    if (d.key.num_nodes >= 2 && d.key.num_replicas >= 2) {
      m.node_counts_.push_back(d.key.num_nodes);
      m.placements_.emplace_back(d.key.num_nodes, d.key.num_replicas);
    }
    m.batch_sizes_.push_back(std::max(1, d.key.local_bsz));
    m.compute_placements_.emplace_back(std::max(1, d.key.num_nodes),
                                       std::max(1, d.key.num_replicas));
  }
  auto unique = [](auto* v) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  };
  unique(&m.node_counts_);
  unique(&m.batch_sizes_);
  unique(&m.placements_);
  unique(&m.compute_placements_);
  const int n_node = static_cast<int>(m.node_counts_.size());
  const int n_batch = static_cast<int>(m.batch_sizes_.size());
  // theta = [core | node | per batch size: batch, sync_batch | per (N, R): compute[, placement]].
  int n_par = kC + n_node + 2 * n_batch;
  for (const auto& [nn, rr] : m.compute_placements_) {
    m.block_offset_.push_back(n_par);
    n_par += nn >= 2 && rr >= 2 ? 2 : 1;
  }
  const int n_eff = n_par - kC;
  const double b_ref = std::exp(sum_lb / data.size());
  m.b_ref_ = b_ref;
  const double ps = options.prior_scale;
  m.node_effect_sigma_ = options.node_effect_sigma * ps;
  m.placement_effect_sigma_ = options.placement_effect_sigma * ps;
  m.batch_effect_sigma_ = options.batch_effect_sigma * ps;
  m.compute_effect_sigma_ = options.compute_effect_sigma * ps;
  m.sync_batch_effect_sigma_ = options.sync_batch_effect_sigma * ps;

  std::vector<Row> rows;
  rows.reserve(data.size());
  std::vector<double> tc_all, sync_node, sync_net, bs;
  std::vector<LinearSample> local_start, net_start;  // (features, all-reduce time) for the start
  tc_all.reserve(data.size());
  bs.reserve(data.size());
  // Per batch size: sum of log(compute per micro-step), count and sum of (GPUs per machine - 1).
  std::vector<double> comp_sum(n_batch, 0.0), comp_g1(n_batch, 0.0);
  std::vector<int> comp_n(n_batch, 0);
  for (const auto& d : data) {
    Row r;
    r.nodes = std::max(1, d.key.num_nodes);
    r.replicas = std::max(1, d.key.num_replicas);
    r.accum = std::max(0, d.key.accum_steps);
    r.b = std::max(1, d.key.local_bsz);
    r.log_step = std::log(d.step_time);
    const int b = static_cast<int>(r.b);
    r.batch = Find(m.batch_sizes_, b);
    rows.push_back(r);
    // sync_time = 0 with several replicas means "not measured" (e.g. Gavel's traces): such a
    // configuration constrains the step time only.
    if (r.replicas >= 2 && d.sync_time <= 0) continue;
    const double tc = std::max(d.step_time - d.sync_time, 1e-3 * d.step_time) / (r.accum + 1);
    comp_sum[r.batch] += std::log(tc);
    comp_n[r.batch] += 1;
    comp_g1[r.batch] += double(r.replicas) / r.nodes - 1.0;
    tc_all.push_back(tc);
    bs.push_back(r.b);
    if (r.replicas >= 2) {
      const double tn = InvertOverlap(d.sync_time, tc, kOmegaPrior);
      if (r.nodes == 1) {
        sync_node.push_back(d.sync_time);
        local_start.push_back({double(r.replicas - 2), 0.0, tn});
      } else {
        sync_net.push_back(d.sync_time);
        net_start.push_back(
            {RGrowth(r.replicas), (double(r.replicas) / r.nodes - 1.0) / (r.nodes - 1), tn});
      }
    }
  }
  if (tc_all.empty())  // no compute measurement at all: use the step times
    for (const auto& d : data) {
      tc_all.push_back(d.step_time / (std::max(0, d.key.accum_steps) + 1));
      bs.push_back(std::max(1, d.key.local_bsz));
    }

  // Starting point and prior centres from simple statistics of the data.
  const double tc_med = Median(tc_all);
  double alpha0 = 0.2 * tc_med, beta0 = 0.8 * tc_med / b_ref;
  {
    double sb = 0, st = 0, sbb = 0, sbt = 0;
    const double n = tc_all.size();
    for (size_t i = 0; i < tc_all.size(); ++i)
      sb += bs[i], st += tc_all[i], sbb += bs[i] * bs[i], sbt += bs[i] * tc_all[i];
    const double den = n * sbb - sb * sb;
    if (den > 1e-9 * n * sbb) {
      const double slope = (n * sbt - sb * st) / den;
      const double icpt = (st - slope * sb) / n;
      if (slope > 0) {
        beta0 = slope;
        alpha0 = std::max(icpt, 0.02 * tc_med);
      }
    }
  }
  double alpha_n0, alpha_l0;
  if (!sync_net.empty()) {
    alpha_n0 = std::max(Median(sync_net), 0.01 * tc_med);
    alpha_l0 =
        sync_node.empty() ? kAlphaLRatio * alpha_n0 : std::max(Median(sync_node), 1e-3 * tc_med);
  } else if (!sync_node.empty()) {
    alpha_l0 = std::max(Median(sync_node), 1e-3 * tc_med);
    alpha_n0 = alpha_l0 / kAlphaLRatio;
  } else {
    alpha_n0 = 0.5 * tc_med;
    alpha_l0 = kAlphaLRatio * alpha_n0;
  }

  auto* prior = new PriorCost;
  prior->priors = {
      {kAlphaC, -1, std::log(0.2 * tc_med), 2.0 * ps},
      {kBetaC, -1, std::log(0.8 * tc_med / b_ref), 2.0 * ps},
      {kKappa, -1, 1.0, 0.3 * ps},
      {kAlphaN, -1, std::log(alpha_n0), 2.0 * ps},
      {kBetaN, kAlphaN, std::log(kBetaNRatio), kRatioSigma * ps},
      {kDeltaN, kAlphaN, std::log(kDeltaNRatio), kRatioSigma * ps},
      {kAlphaL, kAlphaN, std::log(kAlphaLRatio), kRatioSigma * ps},
      {kBetaL, kAlphaL, std::log(kBetaLRatio), kRatioSigma * ps},
      {kGamma, -1, 2.0, 1.5 * ps},
      {kZetaC, -1, 0.0, 0.05 * ps},
      {kOmega, -1, kOmegaPrior, kOmegaSigma * ps},
  };
  const int num_priors = static_cast<int>(prior->priors.size());

  std::vector<double> theta(n_par, 0.0);
  double* th = theta.data();
  th[kAlphaC] = std::log(alpha0);
  th[kBetaC] = std::log(beta0);
  th[kKappa] = 1.0;
  th[kAlphaL] = std::log(alpha_l0);
  th[kBetaL] = std::log(kBetaLRatio * alpha_l0);
  th[kAlphaN] = std::log(alpha_n0);
  th[kBetaN] = std::log(kBetaNRatio * alpha_n0);
  th[kDeltaN] = std::log(kDeltaNRatio * alpha_n0);
  // The all-reduce parameters start where the configurations' all-reduce times (their exposed
  // sync inverted through the starting overlap) put the smooth forms; the medians above, which
  // overlap hides, only where those have no positive fit. The prior centres stay on the medians.
  double c[3];
  if (FitPositiveLinear(net_start, 3, c)) {
    th[kAlphaN] = std::log(c[0]);
    th[kBetaN] = std::log(c[1] > 0 ? c[1] : kBetaNRatio * c[0]);
    th[kDeltaN] = std::log(c[2] > 0 ? c[2] : kDeltaNRatio * c[0]);
  }
  if (FitPositiveLinear(local_start, 2, c)) {
    th[kAlphaL] = std::log(c[0]);
    th[kBetaL] = std::log(c[1] > 0 ? c[1] : kBetaLRatio * c[0]);
  }
  th[kGamma] = 2.0;
  th[kZetaC] = 0.0;
  th[kOmega] = kOmegaPrior;
  for (int i = 0; i < kC; ++i)
    if (IsLogParam(i)) th[i] = std::clamp(th[i], kLogMin + 1, kLogMax - 1);

  ceres::Problem::Options po;
  po.cost_function_ownership = ceres::DO_NOT_TAKE_OWNERSHIP;
  ceres::Problem problem(po);
  CoreCache cache;
  for (int k = 0; k < n_batch; ++k) {
    cache.b.push_back(m.batch_sizes_[k]);
    cache.log_b_rel.push_back(std::log(m.batch_sizes_[k] / b_ref));
  }
  for (auto* v : {&cache.bk, &cache.tc0, &cache.log_tc0}) v->assign(n_batch, 0.0);
  cache.batch_exp.assign(n_batch, {std::nan(""), std::nan(""), 0.0, 0.0});
  // Rows of one placement, by batch size, in groups (kMaxSlots, kMaxGroup): one residual block
  // each.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.nodes, a.replicas, a.batch) < std::tie(b.nodes, b.replicas, b.batch);
  });
  struct Group {
    int begin, count;
    std::vector<int> blocks;  // theta index of each parameter block (the core's is 0)
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < rows.size();) {
    size_t e = i + 1;
    for (int slots = 1; e < rows.size() && e - i < size_t(kMaxGroup) &&
                        rows[e].nodes == rows[i].nodes && rows[e].replicas == rows[i].replicas;
         ++e)
      if (rows[e].batch != rows[e - 1].batch && ++slots > kMaxSlots) break;
    Group g{static_cast<int>(i), static_cast<int>(e - i), {0}};
    const Row& r = rows[i];
    if (r.nodes >= 2 && r.replicas >= 2) g.blocks.push_back(m.NodeIndex(r.nodes));
    g.blocks.push_back(m.ComputeIndex(r.nodes, r.replicas));
    for (size_t k = i; k < e; ++k) {
      const int bi = m.BatchIndex(m.batch_sizes_[rows[k].batch]);
      if (g.blocks.back() != bi) g.blocks.push_back(bi);
      rows[k].slot = static_cast<int>(g.blocks.size()) - (r.nodes >= 2 && r.replicas >= 2 ? 4 : 3);
    }
    groups.push_back(std::move(g));
    i = e;
  }
  std::deque<GroupCost> group_costs;  // not copyable: a deque constructs in place
  std::vector<double*> blocks;
  for (const Group& g : groups) {
    const int slots = static_cast<int>(g.blocks.size()) -
                      (rows[g.begin].nodes >= 2 && rows[g.begin].replicas >= 2 ? 3 : 2);
    group_costs.emplace_back(&rows[g.begin], g.count, slots, 1.0 / options.obs_sigma,
                             options.huber_k, &cache);
    blocks.clear();
    for (int b : g.blocks) blocks.push_back(th + b);
    problem.AddResidualBlock(&group_costs.back(), nullptr, blocks);
  }
  std::deque<ComputeCost> comp_costs;
  if (options.compute_weight > 0)
    for (int k = 0; k < n_batch; ++k) {
      if (comp_n[k] == 0) continue;  // no compute measurement at this batch size
      comp_costs.emplace_back(
          ComputeCost::Item{k, comp_sum[k] / comp_n[k],
                            std::sqrt(comp_n[k] * options.compute_weight) / options.obs_sigma,
                            comp_g1[k] / comp_n[k]},
          options.huber_k, &cache);
      problem.AddResidualBlock(&comp_costs.back(), nullptr, th,
                               th + m.BatchIndex(m.batch_sizes_[k]));
    }
  const int n_data_res = static_cast<int>(rows.size() + comp_costs.size());
  ceres::AutoDiffCostFunction<PriorCost, ceres::DYNAMIC, kC> prior_cost(prior, num_priors);
  problem.AddResidualBlock(&prior_cost, nullptr, th);
  // Each effect: a zero-mean prior with its kind's sigma, and bounds. The (N, R) blocks form the
  // first elimination group of the Schur solver: no configuration touches two of them.
  std::vector<double> effect_inv(n_eff);  // 1 / prior sigma of each effect
  auto ordering = std::make_shared<ceres::ParameterBlockOrdering>();
  std::deque<EffectPrior> effect_priors;
  auto add_block = [&](int index, int size, double sigma0, double sigma1, int group) {
    effect_priors.emplace_back(sigma0, sigma1, size);
    double* p = th + index;
    problem.AddResidualBlock(&effect_priors.back(), nullptr, p);
    for (int i = 0; i < size; ++i) {
      effect_inv[index - kC + i] = effect_priors.back().inv(i);
      problem.SetParameterLowerBound(p, i, -kEffectMax);
      problem.SetParameterUpperBound(p, i, kEffectMax);
    }
    ordering->AddElementToGroup(p, group);
  };
  for (int k = 0; k < n_node; ++k) add_block(kC + k, 1, m.node_effect_sigma_, 0, 1);
  for (int k = 0; k < n_batch; ++k)
    add_block(kC + n_node + 2 * k, 2, m.batch_effect_sigma_, m.sync_batch_effect_sigma_, 1);
  for (size_t k = 0; k < m.compute_placements_.size(); ++k) {
    const auto [nn, rr] = m.compute_placements_[k];
    add_block(m.block_offset_[k], nn >= 2 && rr >= 2 ? 2 : 1, m.compute_effect_sigma_,
              m.placement_effect_sigma_, 0);
  }
  ordering->AddElementToGroup(th, 1);
  for (int i = 0; i < kC; ++i) {
    double lo = kLogMin, hi = kLogMax;
    if (i == kKappa) lo = kKappaMin, hi = kKappaMax;
    if (i == kGamma) lo = kGammaMin, hi = kGammaMax;
    if (i == kZetaC) lo = -0.5, hi = 0.5;
    if (i == kOmega) lo = kOmegaMin, hi = 1.0;
    problem.SetParameterLowerBound(th, i, lo);
    problem.SetParameterUpperBound(th, i, hi);
  }

  ceres::Solver::Options so;
  // Dense reduced system while it is small (the core and the node and batch effects: 50 numbers
  // for bench_fit's 16 batch sizes, <= 58 on the Pollux traces), sparse beyond: a dense one of 200
  // took 0.3 MB, which made a fit of 100 all-distinct configurations hold 81x its input (49x now).
  so.linear_solver_type =
      kC + n_node + 2 * n_batch <= 64 ? ceres::DENSE_SCHUR : ceres::SPARSE_SCHUR;
  so.linear_solver_ordering = ordering;
  so.jacobi_scaling = false;  // already scaled (see below)
  so.max_num_iterations = options.max_iterations;
  so.function_tolerance = options.function_tolerance;
  so.gradient_tolerance = 1e-14;
  so.parameter_tolerance = 1e-10;
  so.num_threads = 1;
  // Parameters are O(1) log times and effects: a first step of norm <= 10 is plenty (Ceres' 1e4
  // wastes several rejected steps), and the projected line search of a bounded problem costs a
  // Jacobian per iteration for steps that rarely touch a bound. Dogleg takes the full Gauss-Newton
  // step once it fits in the trust region, where Levenberg-Marquardt keeps damping it: 7-16
  // iterations instead of 10-27 on the Pollux traces.
  so.trust_region_strategy_type = ceres::DOGLEG;
  so.initial_trust_region_radius = 10;
  so.max_num_line_search_step_size_iterations = 0;
  so.logging_type = ceres::SILENT;
  ceres::Solver::Summary summary;
  CostChangeStop stop(options.cost_tolerance);
  so.callbacks.push_back(&stop);
  ceres::Solve(so, &problem, &summary);
  const bool converged = summary.termination_type == ceres::CONVERGENCE ||
                         summary.termination_type == ceres::USER_SUCCESS;
  m.theta_ = theta;

  // Fit statistics on the step times.
  double ss = 0, sape = 0, ape_max = 0, cost_d = 0;
  std::vector<double> log_step_fit(rows.size(), std::nan(""));
  {
    std::vector<double> res(kMaxGroup);
    std::vector<const double*> params;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      params.clear();
      for (int b : groups[gi].blocks) params.push_back(th + b);
      GroupCost& f = group_costs[gi];
      f.set_log_step_out(&log_step_fit[groups[gi].begin]);
      f.Evaluate(params.data(), res.data(), nullptr);
      f.set_log_step_out(nullptr);
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const double lr = log_step_fit[i] - rows[i].log_step;
    ss += lr * lr;
    const double ape = std::abs(std::exp(lr) - 1.0);
    sape += ape;
    ape_max = std::max(ape_max, ape);
  }
  const int n = static_cast<int>(rows.size());

  // Uncertainty: Gauss-Newton information H = J'J of the data and the priors, in blocks: A (core x
  // core), B (core x effects, dense), D (effects x effects, sparse: pairs that share a residual).
  // The posterior covariance H^-1 via the Schur complement on the core, S = A - B D^-1 B'.
  m.identified_.assign(n_par, false);
  m.noise_sigma_ = options.obs_sigma;
  if (options.compute_uncertainty) {
    Eigen::Matrix<double, kC, kC> a = Eigen::Matrix<double, kC, kC>::Zero();
    Eigen::MatrixXd bm = Eigen::MatrixXd::Zero(kC, n_eff);
    std::vector<Eigen::Triplet<double>> dt;
    dt.reserve(rows.size() * 15 + comp_costs.size() + 2 * n_eff);
    // Adds one data residual's J'J: gradient jc over the core and je over the effects eff.
    auto accumulate = [&](const double* jc, const int* eff, const double* je, int count) {
      Eigen::Map<const Eigen::Matrix<double, kC, 1>> g(jc);
      a.noalias() += g * g.transpose();
      for (int k = 0; k < count; ++k) {
        bm.col(eff[k] - kC) += g * je[k];
        for (int l = 0; l <= k; ++l) {
          const int i = std::max(eff[k], eff[l]) - kC, j = std::min(eff[k], eff[l]) - kC;
          dt.emplace_back(i, j, je[k] * je[l]);
        }
      }
    };
    std::vector<double> res(kMaxGroup), jbuf;
    std::vector<double*> jac;
    std::vector<const double*> params;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const Group& g = groups[gi];
      const GroupCost& f = group_costs[gi];
      const auto& sizes = f.parameter_block_sizes();
      std::vector<int> start(sizes.size());  // offset of each block's Jacobian in jbuf
      int total = 0;
      for (size_t k = 0; k < sizes.size(); ++k) start[k] = total, total += g.count * sizes[k];
      jbuf.assign(total, 0.0);
      jac.resize(sizes.size());
      params.resize(sizes.size());
      for (size_t k = 0; k < sizes.size(); ++k) {
        params[k] = th + g.blocks[k];
        jac[k] = jbuf.data() + start[k];
      }
      f.Evaluate(params.data(), res.data(), jac.data());
      const int fixed = f.has_node() ? 3 : 2;  // core, [node], placement block; then the slots
      for (int i = 0; i < g.count; ++i) {
        cost_d += 0.5 * res[i] * res[i];
        int eff[5], n_e = 0;
        double je[5];
        auto add_block = [&](int k) {
          for (int c = 0; c < sizes[k]; ++c) {
            eff[n_e] = g.blocks[k] + c;
            je[n_e++] = jac[k][i * sizes[k] + c];
          }
        };
        for (int k = 1; k < fixed; ++k) add_block(k);
        add_block(fixed + rows[g.begin + i].slot);
        accumulate(jac[0] + i * kC, eff, je, n_e);
      }
    }
    for (const ComputeCost& c : comp_costs) {
      const int eff = m.BatchIndex(m.batch_sizes_[c.batch()]);
      double jc[kC], je[2], r;
      double* j[2] = {jc, je};
      const double* pp[2] = {th, th + eff};
      c.Evaluate(pp, &r, j);
      cost_d += 0.5 * r * r;
      accumulate(jc, &eff, je, 1);
    }
    // Priors: the core's (autodiff) and one per effect.
    Eigen::Matrix<double, kC, kC> hp;
    {
      std::vector<double> r(num_priors), j(num_priors * kC);
      double* jp[1] = {j.data()};
      const double* pp[1] = {th};
      prior_cost.Evaluate(pp, r.data(), jp);
      Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, kC, Eigen::RowMajor>> jm(
          j.data(), num_priors, kC);
      hp = jm.transpose() * jm;
      a += hp;
    }
    for (int e = 0; e < n_eff; ++e) dt.emplace_back(e, e, effect_inv[e] * effect_inv[e]);
    Eigen::SparseMatrix<double> dm(n_eff, n_eff);
    dm.setFromTriplets(dt.begin(), dt.end());
    std::vector<Eigen::Triplet<double>>().swap(dt);
    Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower> ldlt(dm);
    if (ldlt.info() == Eigen::Success) {
      const Eigen::MatrixXd x = ldlt.solve(bm.transpose());  // D^-1 B', n_eff x kC
      const Eigen::Matrix<double, kC, kC> s = a - bm * x;
      const Eigen::Matrix<double, kC, kC> post_core =
          s.ldlt().solve(Eigen::Matrix<double, kC, kC>::Identity());
      const Eigen::MatrixXd xs = x * post_core;  // n_eff x kC; cross covariance = -xs'
      // Effect pairs: (D^-1)_ij + x_i S^-1 x_j' for the pairs in D's pattern (column j, rows i >=
      // j).
      std::vector<ThroughputModel::EffectPair> pairs;
      std::vector<double> post_eff(n_eff, 0.0);
      const SelectedInverse d_inv(ldlt);
      for (int j = 0; j < n_eff; ++j) {
        for (Eigen::SparseMatrix<double>::InnerIterator it(dm, j); it; ++it) {
          const int i = static_cast<int>(it.row());
          const double v = d_inv(i, j) + xs.row(i).dot(x.row(j));
          pairs.push_back({j, i, v});
          if (i == j) post_eff[j] = v;
        }
      }
      std::sort(pairs.begin(), pairs.end(), [](const auto& p, const auto& q) {
        return std::tie(p.a, p.b) < std::tie(q.a, q.b);
      });
      int p_eff = 0;  // parameters the data identified
      for (int i = 0; i < kC; ++i) {
        // Against the prior variance of parameter i given the others (1 / hp(i, i)): a parameter
        // tied by a prior to one the data pins (alpha_l to alpha_n) is not identified by that.
        m.identified_[i] = hp(i, i) > 0 && post_core(i, i) * hp(i, i) < options.identified_ratio;
        p_eff += m.identified_[i];
      }
      for (int e = 0; e < n_eff; ++e) {
        const double inv2 = effect_inv[e] * effect_inv[e];
        m.identified_[kC + e] = post_eff[e] * inv2 < options.identified_ratio;
        p_eff += m.identified_[kC + e];
      }
      // Scatter of the data around the model relative to obs_sigma (reduced chi-square), shrunk
      // towards 1 (the assumed obs_sigma) by kPriorDof pseudo-observations, so that a fit to a
      // handful of configurations does not claim a tiny scatter.
      constexpr double kPriorDof = 5;
      const double dof = std::max(0, n_data_res - p_eff);
      const double s2 = std::clamp((2.0 * cost_d + kPriorDof) / (dof + kPriorDof), 0.04, 100.0);
      m.cov_core_.resize(kC * kC);
      for (int r = 0; r < kC; ++r)
        for (int c = 0; c < kC; ++c) m.cov_core_[r * kC + c] = s2 * post_core(r, c);
      m.cov_cross_.resize(size_t(kC) * n_eff);
      for (int r = 0; r < kC; ++r)
        for (int e = 0; e < n_eff; ++e) m.cov_cross_[size_t(r) * n_eff + e] = -s2 * xs(e, r);
      for (auto& p : pairs) p.v *= s2;
      m.cov_pairs_ = std::move(pairs);
      const double ndof = std::max(0, n - p_eff);
      m.noise_sigma_ = std::max(
          0.005,
          std::sqrt((ss + kPriorDof * options.obs_sigma * options.obs_sigma) / (ndof + kPriorDof)));
    }
  }

  auto& st = m.stats_;
  st.configurations = n;
  st.residuals = n_data_res;
  st.iterations = static_cast<int>(summary.iterations.size()) - 1;
  st.initial_cost = summary.initial_cost;
  st.final_cost = summary.final_cost;
  st.rms_log_step = std::sqrt(ss / n);
  st.mape_step = sape / n;
  st.max_ape_step = ape_max;
  // USER_SUCCESS is the cost_tolerance stop (CostChangeStop): converged, as Ceres' own tests.
  st.termination =
      converged ? "CONVERGENCE" : ceres::TerminationTypeToString(summary.termination_type);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace cloudtune::estimator
