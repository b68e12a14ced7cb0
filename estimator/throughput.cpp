#include "estimator/throughput.h"

#include <ceres/ceres.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <memory>

#include "estimator/error.h"

namespace cloudtune::estimator {
namespace detail {
namespace {

constexpr int kC = kNumThroughputParams;  // core parameters
constexpr int kJ = kC + 4;  // Jet size: core + this row's node, placement, batch, compute effects
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
constexpr double kEffectMax = 2.0;
// |log multiplier| of an effect

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
  double log_b_rel = 0;  // log(b / b_ref)
  double log_step = 0;
  int node_index = -1;    // index of the node effect (-1: none, one machine)
  int place_index = -1;   // index of the (num_nodes, num_replicas) effect (-1: none)
  int batch_index = 0;    // index of the batch effect
  int compute_index = 0;  // index of the (num_nodes, num_replicas) compute effect
};

// Growth of the network all-reduce time with the number of replicas: log(R/2), the latency of a
// tree (or the chunk count of a pipelined ring); a linear (R - 2) term, as in Pollux, over-predicts
// large jobs.
inline double RGrowth(int r) { return std::log(r / 2.0); }

// The model: per micro-step compute time T_c and step time, given the core parameters and this
// configuration's network effect (node + placement, log multiplier of T_n) and batch effect (log
// multiplier of T_c).
template <typename T>
void Times(const T* th, const T& node_eff, const T& batch_eff, int nodes, int replicas, double b,
           double log_b_rel, int accum, T* tc_out, T* step_out) {
  using std::exp;
  using std::log;
  const double g1 = double(replicas) / double(std::max(1, nodes)) - 1.0;  // extra GPUs per machine
  T tc = (exp(th[kAlphaC]) + exp(th[kBetaC]) * b * exp((th[kKappa] - 1.0) * log_b_rel)) *
         exp(batch_eff + th[kZetaC] * g1);
  T t = tc;
  if (replicas >= 2) {
    T tn;
    if (nodes <= 1) {
      tn = exp(th[kAlphaL]) + exp(th[kBetaL]) * double(replicas - 2);
    } else {
      const double g = double(replicas) / double(nodes);
      tn = (exp(th[kAlphaN]) + exp(th[kBetaN]) * RGrowth(replicas) +
            exp(th[kDeltaN]) * (g - 1.0) / double(nodes - 1)) *
           exp(node_eff);
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

using Jet = ceres::Jet<double, kJ>;

// exp() of the core's log parameters, recomputed only when the core changes (Ceres evaluates all
// residual blocks at one point in turn; the fit is single-threaded).
struct CoreCache {
  double key[kC] = {};
  bool valid = false;
  double exp_alpha_c = 0, exp_beta_c = 0, exp_alpha_l = 0, exp_beta_l = 0, exp_alpha_n = 0,
         exp_beta_n = 0, exp_delta_n = 0;
  // Per batch size (index k): b, log(b / b_ref) (set once), and from the current core and batch
  // effects: the batch term bk = beta_c * b * (b/b_ref)^(kappa-1), exp(effect), tc, log(tc).
  std::vector<double> b, log_b_rel, batch_key, bk, eb, tc, log_tc;
  bool batch_valid = false;

  const CoreCache& Update(const double* th, const double* batch) {
    UpdateCore(th);
    const size_t n = b.size();
    if (batch_valid && std::equal(batch, batch + n, batch_key.begin())) return *this;
    std::copy(batch, batch + n, batch_key.begin());
    batch_valid = true;
    for (size_t k = 0; k < n; ++k) {
      bk[k] = exp_beta_c * b[k] * std::exp((th[kKappa] - 1.0) * log_b_rel[k]);
      eb[k] = std::exp(batch[k]);
      tc[k] = (exp_alpha_c + bk[k]) * eb[k];
      log_tc[k] = std::log(tc[k]);
    }
    return *this;
  }
  void UpdateCore(const double* th) {
    if (valid && std::equal(th, th + kC, key)) return;
    std::copy(th, th + kC, key);
    valid = true;
    batch_valid = false;
    exp_alpha_c = std::exp(th[kAlphaC]);
    exp_beta_c = std::exp(th[kBetaC]);
    exp_alpha_l = std::exp(th[kAlphaL]);
    exp_beta_l = std::exp(th[kBetaL]);
    exp_alpha_n = std::exp(th[kAlphaN]);
    exp_beta_n = std::exp(th[kBetaN]);
    exp_delta_n = std::exp(th[kDeltaN]);
  }
};

// log(step time) of one configuration; residual in units of obs_sigma. Parameter blocks: core,
// [node effect], batch effect.
// Huber in residual form: returns psi(r) with psi^2/2 = huber(r), and d psi / d r. Applied per
// residual inside the grouped cost functions (a Ceres LossFunction would act on a whole group).
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
// each, in units of obs_sigma, robustified. Grouping keeps the number of residual blocks (and
// Ceres' per-block overhead) small. Parameter blocks: core, [node effect, placement effect] (only
// for N >= 2), batch effects (all of them, one block).
class StepGroupCost : public ceres::CostFunction {
 public:
  StepGroupCost(const Row* rows, int count, int n_batch, double inv_sigma, double huber_k,
                CoreCache* cache)
      : rows_(rows),
        count_(count),
        n_batch_(n_batch),
        has_node_(rows[0].node_index >= 0),
        inv_sigma_(inv_sigma),
        huber_k_(huber_k),
        cache_(cache) {
    set_num_residuals(count);
    auto* sizes = mutable_parameter_block_sizes();
    sizes->push_back(kC);
    if (has_node_) {
      sizes->push_back(1);
      sizes->push_back(1);
    }
    sizes->push_back(n_batch);
    sizes->push_back(1);  // this placement's compute effect
  }

  // Analytic derivatives (Times() is the reference; tests check the fit against known truth).
  // All rows share the placement, so T_n is computed once; T_c comes from the per-batch cache.
  bool Evaluate(double const* const* p, double* residuals, double** jacobians) const override {
    const double* th = p[0];
    const double* batch = p[has_node_ ? 3 : 1];
    const double ce = p[has_node_ ? 4 : 2][0];
    const CoreCache& c = cache_->Update(th, batch);
    double* jc = jacobians ? jacobians[0] : nullptr;
    double* jn = jacobians && has_node_ ? jacobians[1] : nullptr;
    double* jp = jacobians && has_node_ ? jacobians[2] : nullptr;
    double* jb = jacobians ? jacobians[has_node_ ? 3 : 1] : nullptr;
    double* jce = jacobians ? jacobians[has_node_ ? 4 : 2] : nullptr;
    if (jb) std::fill(jb, jb + count_ * n_batch_, 0.0);
    const double gamma = th[kGamma], omega = th[kOmega], log_omega = std::log(omega);
    // The network all-reduce time of this placement and its derivatives.
    const Row& r0 = rows_[0];
    double tn = 0, log_tn = 0;
    double d_tn[kC] = {};  // d tn / d theta
    if (r0.replicas >= 2) {
      if (r0.nodes <= 1) {
        const double bl = c.exp_beta_l * (r0.replicas - 2);
        tn = c.exp_alpha_l + bl;
        d_tn[kAlphaL] = c.exp_alpha_l;
        d_tn[kBetaL] = bl;
      } else {
        const double en = std::exp(p[1][0] + p[2][0]);
        const double g = double(r0.replicas) / r0.nodes;
        const double bn = c.exp_beta_n * RGrowth(r0.replicas);
        const double dn = c.exp_delta_n * (g - 1.0) / (r0.nodes - 1);
        tn = (c.exp_alpha_n + bn + dn) * en;
        d_tn[kAlphaN] = c.exp_alpha_n * en;
        d_tn[kBetaN] = bn * en;
        d_tn[kDeltaN] = dn * en;
      }
      log_tn = std::log(tn);
    }
    // Compute slows down with the GPUs sharing a machine: tc *= exp(zeta_c * (g - 1)).
    const double g1 = double(r0.replicas) / r0.nodes - 1.0;
    const double eg = std::exp(th[kZetaC] * g1 + ce);
    for (int i = 0; i < count_; ++i) {
      const Row& r = rows_[i];
      const int bi = r.batch_index;
      const double tc = c.tc[bi] * eg, log_tc = c.log_tc[bi] + th[kZetaC] * g1 + ce;
      double log_t = log_tc, dlogt_dlogtc = 1, dlogt_dlogtn = 0, dlogt_dgamma = 0;
      double dlogt_domega = 0;
      if (r.replicas >= 2) {
        // T = tc + tn - m, m = softmin(a, tn), a = omega tc:
        // log m = log a - softplus(u) / gamma, u = gamma * log(a / tn).
        const double la = log_omega + log_tc;
        const double lr = la - log_tn;
        const double u = gamma * lr;
        const double eu = std::exp(-std::abs(u));
        const double sp = std::max(u, 0.0) + std::log1p(eu);
        const double sig = u > 0 ? 1.0 / (1.0 + eu) : eu / (1.0 + eu);
        const double mm = std::exp(la - sp / gamma);
        const double t = tc + tn - mm;
        log_t = std::log(t);
        dlogt_dlogtc = (tc - mm * (1.0 - sig)) / t;
        dlogt_dlogtn = (tn - mm * sig) / t;
        dlogt_dgamma = -mm * (sp / (gamma * gamma) - sig * lr / gamma) / t;
        dlogt_domega = -mm * (1.0 - sig) / (omega * t);
      }
      // step = accum * tc + T;  w = T / step (1 without accumulation).
      double log_step = log_t, w = 1.0;
      if (r.accum > 0) {
        const double t = std::exp(log_t), step = r.accum * tc + t;
        log_step = std::log(step);
        w = t / step;
      }
      double slope;
      residuals[i] = Robust((log_step - r.log_step) * inv_sigma_, huber_k_, &slope);
      if (!std::isfinite(residuals[i])) return false;
      if (!jacobians) continue;
      // d log(step) = (1 - w) dlog tc + w (dlogt_dlogtc dlog tc + dlogt_dlogtn dlog tn + ... dg)
      const double k = slope * inv_sigma_;
      const double ktc = k * ((1.0 - w) + w * dlogt_dlogtc) / tc;   // per unit of tc
      const double ktn = tn > 0 ? k * w * dlogt_dlogtn / tn : 0.0;  // per unit of tn
      if (jc) {
        double* j = jc + i * kC;
        for (int q = 0; q < kC; ++q) j[q] = ktn * d_tn[q];
        j[kAlphaC] = ktc * c.exp_alpha_c * c.eb[bi] * eg;
        j[kBetaC] = ktc * c.bk[bi] * c.eb[bi] * eg;
        j[kKappa] = ktc * c.bk[bi] * c.eb[bi] * eg * c.log_b_rel[bi];
        j[kGamma] = k * w * dlogt_dgamma;
        j[kOmega] = k * w * dlogt_domega;
        j[kZetaC] = ktc * tc * g1;
      }
      if (jn) jn[i] = ktn * tn;
      if (jp) jp[i] = ktn * tn;
      if (jb) jb[i * n_batch_ + bi] = ktc * tc;
      if (jce) jce[i] = ktc * tc;
    }
    return true;
  }

 private:
  const Row* rows_;
  int count_, n_batch_;
  bool has_node_;
  double inv_sigma_, huber_k_;
  CoreCache* cache_;
};

// Zero-mean prior on a block of effects.
class EffectPrior : public ceres::CostFunction {
 public:
  EffectPrior(int size, double sigma) : inv_(1.0 / sigma) {
    set_num_residuals(size);
    mutable_parameter_block_sizes()->push_back(size);
  }
  bool Evaluate(double const* const* p, double* r, double** j) const override {
    const int n = num_residuals();
    for (int i = 0; i < n; ++i) r[i] = p[0][i] * inv_;
    if (j && j[0]) {
      std::fill(j[0], j[0] + n * n, 0.0);
      for (int i = 0; i < n; ++i) j[0][i * n + i] = inv_;
    }
    return true;
  }

 private:
  double inv_;
};

// Mean log(compute time per micro-step) of the configurations at each batch size, one residual
// per batch size weighted by sqrt(count * compute_weight), robustified. Parameter blocks: core,
// batch effects.
class ComputeCost : public ceres::CostFunction {
 public:
  struct Item {
    int batch_index;
    double b, log_b_rel, target, scale;
    double mean_g1;  // mean (GPUs per machine - 1) of the configurations averaged
  };
  ComputeCost(std::vector<Item> items, int n_batch, double huber_k)
      : items_(std::move(items)), n_batch_(n_batch), huber_k_(huber_k) {
    set_num_residuals(static_cast<int>(items_.size()));
    mutable_parameter_block_sizes()->push_back(kC);
    mutable_parameter_block_sizes()->push_back(n_batch);
  }
  bool Evaluate(double const* const* p, double* residuals, double** jacobians) const override {
    using J = ceres::Jet<double, kC + 1>;
    const int n = static_cast<int>(items_.size());
    if (jacobians && jacobians[1]) std::fill(jacobians[1], jacobians[1] + n * n_batch_, 0.0);
    J th[kC];
    for (int i = 0; i < kC; ++i) th[i] = J(p[0][i], i);
    const J zero(0.0);
    for (int k = 0; k < n; ++k) {
      const Item& it = items_[k];
      const J be(p[1][it.batch_index], kC);
      J tc, step;
      Times(th, zero, be, 1, 1, it.b, it.log_b_rel, 0, &tc, &step);
      const J res = (log(tc) + th[kZetaC] * it.mean_g1 - it.target) * it.scale;
      double slope;
      residuals[k] = Robust(res.a, huber_k_, &slope);
      if (!std::isfinite(residuals[k])) return false;
      if (jacobians) {
        if (jacobians[0])
          for (int i = 0; i < kC; ++i) jacobians[0][k * kC + i] = slope * res.v[i];
        if (jacobians[1]) jacobians[1][k * n_batch_ + it.batch_index] = slope * res.v[kC];
      }
    }
    return true;
  }

 private:
  std::vector<Item> items_;
  int n_batch_;
  double huber_k_;
};

// Weak log-normal priors on the core, some linking parameters to each other so that a parameter
// without data follows the ones that have it (e.g. one machine's all-reduce ~ a tenth of the
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

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
  if (!(obs_sigma > 0) || !std::isfinite(obs_sigma)) return fail("obs_sigma must be > 0");
  if (!(huber_k >= 0) || !std::isfinite(huber_k)) return fail("huber_k must be >= 0");
  if (!(compute_weight >= 0) || !std::isfinite(compute_weight))
    return fail("compute_weight must be >= 0");
  if (!(node_effect_sigma > 0) || !std::isfinite(node_effect_sigma))
    return fail("node_effect_sigma must be > 0");
  if (!(placement_effect_sigma > 0) || !std::isfinite(placement_effect_sigma))
    return fail("placement_effect_sigma must be > 0");
  if (!(batch_effect_sigma > 0) || !std::isfinite(batch_effect_sigma))
    return fail("batch_effect_sigma must be > 0");
  if (!(compute_effect_sigma > 0) || !std::isfinite(compute_effect_sigma))
    return fail("compute_effect_sigma must be > 0");
  if (!(prior_scale > 0) || !std::isfinite(prior_scale)) return fail("prior_scale must be > 0");
  if (!(identified_ratio > 0 && identified_ratio < 1))
    return fail("identified_ratio must be in (0, 1)");
  if (max_iterations < 1) return fail("max_iterations must be >= 1");
  if (!(function_tolerance > 0)) return fail("function_tolerance must be > 0");
  return true;
}

double ThroughputModel::param(int i) const {
  const double t = theta_.at(i);
  return detail::IsLogParam(i) ? std::exp(t) : t;
}

double ThroughputModel::param_sigma(int i) const {
  const size_t n = theta_.size();
  const double v = covariance_.empty() ? 0 : covariance_.at(i * n + i);
  return v > 0 ? std::sqrt(v) : 0;
}

int ThroughputModel::NodeIndex(int num_nodes) const {
  auto it = std::lower_bound(node_counts_.begin(), node_counts_.end(), num_nodes);
  if (it == node_counts_.end() || *it != num_nodes) return -1;
  return kNumThroughputParams + static_cast<int>(it - node_counts_.begin());
}

int ThroughputModel::PlaceIndex(int num_nodes, int num_replicas) const {
  const std::pair<int, int> k(num_nodes, num_replicas);
  auto it = std::lower_bound(placements_.begin(), placements_.end(), k);
  if (it == placements_.end() || *it != k) return -1;
  return kNumThroughputParams + static_cast<int>(node_counts_.size()) +
         static_cast<int>(it - placements_.begin());
}

int ThroughputModel::BatchIndex(int local_bsz) const {
  auto it = std::lower_bound(batch_sizes_.begin(), batch_sizes_.end(), local_bsz);
  if (it == batch_sizes_.end() || *it != local_bsz) return -1;
  return kNumThroughputParams + static_cast<int>(node_counts_.size() + placements_.size()) +
         static_cast<int>(it - batch_sizes_.begin());
}

int ThroughputModel::ComputeIndex(int num_nodes, int num_replicas) const {
  const std::pair<int, int> k(num_nodes, num_replicas);
  auto it = std::lower_bound(compute_placements_.begin(), compute_placements_.end(), k);
  if (it == compute_placements_.end() || *it != k) return -1;
  return kNumThroughputParams +
         static_cast<int>(node_counts_.size() + placements_.size() + batch_sizes_.size()) +
         static_cast<int>(it - compute_placements_.begin());
}

double ThroughputModel::compute_effect(int num_nodes, int num_replicas) const {
  const int i = ComputeIndex(num_nodes, num_replicas);
  return i < 0 ? 0 : theta_[i];
}

double ThroughputModel::placement_effect(int num_nodes, int num_replicas) const {
  const int i = PlaceIndex(num_nodes, num_replicas);
  return i < 0 ? 0 : theta_[i];
}

double ThroughputModel::node_effect(int num_nodes) const {
  const int i = NodeIndex(num_nodes);
  return i < 0 ? 0 : theta_[i];
}

double ThroughputModel::batch_effect(int local_bsz) const {
  const int i = BatchIndex(local_bsz);
  return i < 0 ? 0 : theta_[i];
}

StepPrediction ThroughputModel::Predict(const ConfigKey& key, int gpus_per_node) const {
  using detail::Jet;
  constexpr int kC = kNumThroughputParams;
  int nodes = key.num_nodes;
  const int replicas = std::max(1, key.num_replicas);
  if (nodes < 1) nodes = gpus_per_node > 0 ? (replicas + gpus_per_node - 1) / gpus_per_node : 1;
  const double b = std::max(1, key.local_bsz);
  const int accum = std::max(0, key.accum_steps);
  const bool net = replicas >= 2 && nodes >= 2;
  const int ni = net ? NodeIndex(nodes) : -1;
  const int pi = net ? PlaceIndex(nodes, replicas) : -1;
  const int bi = BatchIndex(static_cast<int>(b));
  const int ci = ComputeIndex(nodes, replicas);
  Jet th[kC];
  for (int i = 0; i < kC; ++i) th[i] = Jet(theta_[i], i);
  const Jet ne = Jet(ni >= 0 ? theta_[ni] : 0.0, kC) + Jet(pi >= 0 ? theta_[pi] : 0.0, kC + 1);
  const Jet be = Jet(bi >= 0 ? theta_[bi] : 0.0, kC + 2) + Jet(ci >= 0 ? theta_[ci] : 0.0, kC + 3);
  Jet tc, step;
  detail::Times(th, ne, be, nodes, replicas, b, std::log(b / b_ref_), accum, &tc, &step);
  StepPrediction p;
  p.compute_time = tc.a;
  p.step_time = step.a;
  p.sync_time = std::max(0.0, step.a - (accum + 1) * tc.a);
  p.throughput = static_cast<double>(replicas) * b * (accum + 1) / step.a;
  // Delta method on log(step): g' C g over the parameters used, plus the prior variance of an
  // effect the fit did not see, plus the scatter of one measurement.
  const size_t n = theta_.size();
  std::vector<std::pair<int, double>> g;
  for (int i = 0; i < kC; ++i) g.emplace_back(i, step.v[i] / step.a);
  double var = noise_sigma_ * noise_sigma_;
  const double gn = step.v[kC] / step.a, gb = step.v[kC + 2] / step.a, gc = step.v[kC + 3] / step.a;
  if (ni >= 0)
    g.emplace_back(ni, gn);
  else if (net)
    var += gn * gn * node_effect_sigma_ * node_effect_sigma_;
  if (pi >= 0)
    g.emplace_back(pi, gn);
  else if (net)
    var += gn * gn * placement_effect_sigma_ * placement_effect_sigma_;
  if (bi >= 0)
    g.emplace_back(bi, gb);
  else
    var += gb * gb * batch_effect_sigma_ * batch_effect_sigma_;
  if (ci >= 0)
    g.emplace_back(ci, gc);
  else
    var += gc * gc * compute_effect_sigma_ * compute_effect_sigma_;
  if (covariance_.size() == n * n)
    for (const auto& [i, gi] : g)
      for (const auto& [j, gj] : g) var += gi * covariance_[i * n + j] * gj;
  p.log_sigma = std::sqrt(std::max(0.0, var));
  return p;
}

nlohmann::json ThroughputModel::ToJson() const {
  nlohmann::json j;
  j["schema"] = "cloudtune.throughput_model/1";
  j["model"] = {{"form",
                 "T_c = (alpha_c + beta_c*b*(b/b_ref)^(kappa-1))*exp(batch_effect[b] + "
                 "compute_effect[N,R] + zeta_c*(R/N-1)); "
                 "T_n = 0 (R=1), "
                 "alpha_l + beta_l*(R-2) (N=1), (alpha_n + beta_n*log(R/2) + "
                 "delta_n*(R/N-1)/(N-1))*exp(node_effect[N] + placement_effect[N,R]) (N>=2); "
                 "T = T_c + T_n - (a^-gamma + T_n^-gamma)^(-1/gamma), a = omega*T_c; "
                 "step = s*T_c + T (s = accum_steps)"},
                {"b_ref", b_ref_},
                {"noise_sigma", noise_sigma_},
                {"node_effect_sigma", node_effect_sigma_},
                {"placement_effect_sigma", placement_effect_sigma_},
                {"batch_effect_sigma", batch_effect_sigma_},
                {"compute_effect_sigma", compute_effect_sigma_}};
  nlohmann::json ps = nlohmann::json::array();
  for (int i = 0; i < kNumThroughputParams; ++i) {
    ps.push_back({{"name", ThroughputParamName(i)},
                  {"value", param(i)},
                  {"unit", ThroughputParamUnit(i)},
                  {"identified", static_cast<bool>(identified_[i])},
                  {"sigma", param_sigma(i)},
                  {"sigma_scale", detail::IsLogParam(i) ? "log" : "linear"}});
  }
  j["parameters"] = ps;
  nlohmann::json ne = nlohmann::json::array(), pe = nlohmann::json::array(),
                 be = nlohmann::json::array();
  for (int n : node_counts_) {
    const int i = NodeIndex(n);
    ne.push_back({{"num_nodes", n},
                  {"value", theta_[i]},
                  {"identified", static_cast<bool>(identified_[i])},
                  {"sigma", param_sigma(i)}});
  }
  for (const auto& [nn, rr] : placements_) {
    const int i = PlaceIndex(nn, rr);
    pe.push_back({{"num_nodes", nn},
                  {"num_replicas", rr},
                  {"value", theta_[i]},
                  {"identified", static_cast<bool>(identified_[i])},
                  {"sigma", param_sigma(i)}});
  }
  for (int b : batch_sizes_) {
    const int i = BatchIndex(b);
    be.push_back({{"local_bsz", b},
                  {"value", theta_[i]},
                  {"identified", static_cast<bool>(identified_[i])},
                  {"sigma", param_sigma(i)}});
  }
  j["node_effects"] = ne;       // log multipliers of T_n
  j["placement_effects"] = pe;  // log multipliers of T_n
  j["batch_effects"] = be;      // log multipliers of T_c
  nlohmann::json ce = nlohmann::json::array();
  for (const auto& [nn, rr] : compute_placements_) {
    const int i = ComputeIndex(nn, rr);
    ce.push_back({{"num_nodes", nn},
                  {"num_replicas", rr},
                  {"value", theta_[i]},
                  {"identified", static_cast<bool>(identified_[i])},
                  {"sigma", param_sigma(i)}});
  }
  j["compute_effects"] = ce;  // log multipliers of T_c
  const size_t n = theta_.size();
  nlohmann::json cov = nlohmann::json::array();
  for (size_t r = 0; r < n; ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (size_t c = 0; c < n; ++c)
      row.push_back(covariance_.empty() ? 0.0 : covariance_[r * n + c]);
    cov.push_back(row);
  }
  j["covariance"] = cov;  // of [log/linear core parameters | node | placement | batch | compute]
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
    fail("missing \"schema\" (expected \"cloudtune.throughput_model/1\")");
  if (j["schema"] != "cloudtune.throughput_model/1")
    fail("schema is \"" + j["schema"].get<std::string>() +
         "\", expected \"cloudtune.throughput_model/1\"");
  ThroughputModel m;
  if (!j.contains("model") || !j["model"].is_object()) fail("missing object \"model\"");
  const auto& mo = j["model"];
  m.b_ref_ = number(mo, "b_ref", "model");
  if (!(m.b_ref_ > 0)) fail("model.b_ref: must be positive");
  m.noise_sigma_ = number(mo, "noise_sigma", "model");
  m.node_effect_sigma_ = number(mo, "node_effect_sigma", "model");
  m.placement_effect_sigma_ = number(mo, "placement_effect_sigma", "model");
  m.batch_effect_sigma_ = number(mo, "batch_effect_sigma", "model");
  m.compute_effect_sigma_ =
      mo.contains("compute_effect_sigma") ? number(mo, "compute_effect_sigma", "model") : 0.0;
  if (m.noise_sigma_ < 0 || m.node_effect_sigma_ < 0 || m.placement_effect_sigma_ < 0 ||
      m.batch_effect_sigma_ < 0 || m.compute_effect_sigma_ < 0)
    fail("model: sigmas must be >= 0");
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
  auto effects = [&](const char* field, const char* key, std::vector<int>* values, int min_value) {
    if (!j.contains(field)) return;
    const auto& a = j[field];
    if (!a.is_array()) fail(std::string(field) + ": expected an array");
    int prev = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      const std::string at = std::string(field) + "[" + std::to_string(k) + "]";
      if (!a[k].is_object()) fail(at + ": expected an object");
      const double x = number(a[k], key, at);
      if (x != std::floor(x) || x < min_value || x > 1e9 || x <= prev)
        fail(at + "." + key + ": expected an increasing integer >= " + std::to_string(min_value));
      prev = static_cast<int>(x);
      values->push_back(prev);
      m.theta_.push_back(number(a[k], "value", at));
      m.identified_.push_back(flag(a[k]));
    }
  };
  effects("node_effects", "num_nodes", &m.node_counts_, 2);
  if (j.contains("placement_effects")) {
    const auto& a = j["placement_effects"];
    if (!a.is_array()) fail("placement_effects: expected an array");
    for (size_t k = 0; k < a.size(); ++k) {
      const std::string at = "placement_effects[" + std::to_string(k) + "]";
      if (!a[k].is_object()) fail(at + ": expected an object");
      const double nn = number(a[k], "num_nodes", at), rr = number(a[k], "num_replicas", at);
      if (nn != std::floor(nn) || rr != std::floor(rr) || nn < 2 || rr < nn || rr > 1e9)
        fail(at + ": expected integers 2 <= num_nodes <= num_replicas");
      const std::pair<int, int> key(static_cast<int>(nn), static_cast<int>(rr));
      if (!m.placements_.empty() && !(m.placements_.back() < key))
        fail(at + ": placements must be sorted and distinct");
      m.placements_.push_back(key);
      m.theta_.push_back(number(a[k], "value", at));
      m.identified_.push_back(flag(a[k]));
    }
  }
  effects("batch_effects", "local_bsz", &m.batch_sizes_, 1);
  if (j.contains("compute_effects")) {
    const auto& a = j["compute_effects"];
    if (!a.is_array()) fail("compute_effects: expected an array");
    for (size_t k = 0; k < a.size(); ++k) {
      const std::string at = "compute_effects[" + std::to_string(k) + "]";
      if (!a[k].is_object()) fail(at + ": expected an object");
      const double nn = number(a[k], "num_nodes", at), rr = number(a[k], "num_replicas", at);
      if (nn != std::floor(nn) || rr != std::floor(rr) || nn < 1 || rr < nn || rr > 1e9)
        fail(at + ": expected integers 1 <= num_nodes <= num_replicas");
      const std::pair<int, int> key(static_cast<int>(nn), static_cast<int>(rr));
      if (!m.compute_placements_.empty() && !(m.compute_placements_.back() < key))
        fail(at + ": placements must be sorted and distinct");
      m.compute_placements_.push_back(key);
      m.theta_.push_back(number(a[k], "value", at));
      m.identified_.push_back(flag(a[k]));
    }
  }
  const size_t n = m.theta_.size();
  if (j.contains("covariance")) {
    const auto& c = j["covariance"];
    const std::string dims = std::to_string(n) + "x" + std::to_string(n);
    if (!c.is_array() || c.size() != n) fail("covariance: expected a " + dims + " array");
    m.covariance_.assign(n * n, 0);
    for (size_t r = 0; r < n; ++r) {
      if (!c[r].is_array() || c[r].size() != n)
        fail("covariance[" + std::to_string(r) + "]: expected " + std::to_string(n) + " numbers");
      for (size_t q = 0; q < n; ++q) {
        if (!c[r][q].is_number() || !std::isfinite(c[r][q].get<double>()))
          fail("covariance[" + std::to_string(r) + "][" + std::to_string(q) +
               "]: expected a finite number");
        m.covariance_[r * n + q] = c[r][q].get<double>();
      }
    }
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
  // Distinct node counts (>= 2, with >= 2 replicas) and batch sizes get an effect each.
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
  for (auto* v : {&m.node_counts_, &m.batch_sizes_}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  std::sort(m.placements_.begin(), m.placements_.end());
  m.placements_.erase(std::unique(m.placements_.begin(), m.placements_.end()), m.placements_.end());
  std::sort(m.compute_placements_.begin(), m.compute_placements_.end());
  m.compute_placements_.erase(
      std::unique(m.compute_placements_.begin(), m.compute_placements_.end()),
      m.compute_placements_.end());
  const int n_node = static_cast<int>(m.node_counts_.size());
  const int n_batch = static_cast<int>(m.batch_sizes_.size());
  const int n_place = static_cast<int>(m.placements_.size());
  const int n_cpl = static_cast<int>(m.compute_placements_.size());
  const int n_par = kC + n_node + n_place + n_batch + n_cpl;
  const double b_ref = std::exp(sum_lb / data.size());
  m.b_ref_ = b_ref;
  m.node_effect_sigma_ = options.node_effect_sigma * options.prior_scale;
  m.placement_effect_sigma_ = options.placement_effect_sigma * options.prior_scale;
  m.batch_effect_sigma_ = options.batch_effect_sigma * options.prior_scale;
  m.compute_effect_sigma_ = options.compute_effect_sigma * options.prior_scale;

  std::vector<Row> rows;
  rows.reserve(data.size());
  std::vector<double> tc_all, sync_node, sync_net, bs;
  tc_all.reserve(data.size());
  bs.reserve(data.size());
  // Per batch size: sum of log(compute per micro-step) and count.
  std::vector<std::pair<double, int>> comp(n_batch, {0.0, 0});
  std::vector<double> comp_g1(n_batch, 0.0);
  for (const auto& d : data) {
    Row r;
    r.nodes = std::max(1, d.key.num_nodes);
    r.replicas = std::max(1, d.key.num_replicas);
    r.accum = std::max(0, d.key.accum_steps);
    r.b = std::max(1, d.key.local_bsz);
    r.log_b_rel = std::log(r.b / b_ref);
    r.log_step = std::log(d.step_time);
    if (r.nodes >= 2 && r.replicas >= 2) {
      r.node_index = m.NodeIndex(r.nodes) - kC;
      r.place_index = m.PlaceIndex(r.nodes, r.replicas) - kC - n_node;
    }
    r.batch_index = m.BatchIndex(static_cast<int>(r.b)) - kC - n_node - n_place;
    r.compute_index = m.ComputeIndex(r.nodes, r.replicas) - kC - n_node - n_place - n_batch;
    rows.push_back(r);
    // sync_time = 0 with several replicas means "not measured" (e.g. Gavel's traces): such a
    // configuration constrains the step time only.
    if (r.replicas >= 2 && d.sync_time <= 0) continue;
    const double tc = std::max(d.step_time - d.sync_time, 1e-3 * d.step_time) / (r.accum + 1);
    comp[r.batch_index].first += std::log(tc);
    comp[r.batch_index].second += 1;
    comp_g1[r.batch_index] += double(r.replicas) / r.nodes - 1.0;
    tc_all.push_back(tc);
    bs.push_back(r.b);
    if (r.replicas >= 2) (r.nodes == 1 ? sync_node : sync_net).push_back(d.sync_time);
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

  const double ps = options.prior_scale;
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
  th[kGamma] = 2.0;
  th[kZetaC] = 0.0;
  th[kOmega] = kOmegaPrior;
  for (int i = 0; i < kC; ++i)
    if (IsLogParam(i)) th[i] = std::clamp(th[i], kLogMin + 1, kLogMax - 1);
  double* node_eff = th + kC;
  double* place_eff = th + kC + n_node;
  double* batch_eff = th + kC + n_node + n_place;
  double* comp_eff = batch_eff + n_batch;

  // Rows of one placement form one residual block.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::make_pair(a.nodes, a.replicas) < std::make_pair(b.nodes, b.replicas);
  });
  ceres::Problem::Options po;
  po.cost_function_ownership = ceres::DO_NOT_TAKE_OWNERSHIP;
  ceres::Problem problem(po);
  CoreCache cache;
  for (int k = 0; k < n_batch; ++k) {
    cache.b.push_back(m.batch_sizes_[k]);
    cache.log_b_rel.push_back(std::log(m.batch_sizes_[k] / b_ref));
  }
  for (auto* v : {&cache.batch_key, &cache.bk, &cache.eb, &cache.tc, &cache.log_tc})
    v->assign(n_batch, 0.0);
  std::deque<StepGroupCost> step_costs;  // not copyable: a deque constructs in place
  std::vector<ceres::ResidualBlockId> data_ids;
  int n_data_res = 0;
  for (size_t i = 0; i < rows.size();) {
    size_t e = i + 1;
    while (e < rows.size() && rows[e].nodes == rows[i].nodes &&
           rows[e].replicas == rows[i].replicas)
      ++e;
    const Row& r = rows[i];
    step_costs.emplace_back(&rows[i], static_cast<int>(e - i), n_batch, 1.0 / options.obs_sigma,
                            options.huber_k, &cache);
    if (r.node_index >= 0)
      data_ids.push_back(problem.AddResidualBlock(
          &step_costs.back(), nullptr, th, node_eff + r.node_index, place_eff + r.place_index,
          batch_eff, comp_eff + r.compute_index));
    else
      data_ids.push_back(problem.AddResidualBlock(&step_costs.back(), nullptr, th, batch_eff,
                                                  comp_eff + r.compute_index));
    n_data_res += static_cast<int>(e - i);
    i = e;
  }
  std::unique_ptr<ComputeCost> comp_cost;
  if (options.compute_weight > 0) {
    std::vector<ComputeCost::Item> items;
    for (int k = 0; k < n_batch; ++k) {
      const double b = m.batch_sizes_[k];
      if (comp[k].second == 0) continue;  // no compute measurement at this batch size
      items.push_back({k, b, std::log(b / b_ref), comp[k].first / comp[k].second,
                       std::sqrt(comp[k].second * options.compute_weight) / options.obs_sigma,
                       comp_g1[k] / comp[k].second});
    }
    if (!items.empty()) {
      n_data_res += static_cast<int>(items.size());
      comp_cost = std::make_unique<ComputeCost>(std::move(items), n_batch, options.huber_k);
      data_ids.push_back(problem.AddResidualBlock(comp_cost.get(), nullptr, th, batch_eff));
    }
  }
  ceres::AutoDiffCostFunction<PriorCost, ceres::DYNAMIC, kC> prior_cost(prior, num_priors);
  EffectPrior node_prior(1, m.node_effect_sigma_), place_prior(1, m.placement_effect_sigma_),
      batch_prior(n_batch, m.batch_effect_sigma_), comp_prior(1, m.compute_effect_sigma_);
  std::vector<ceres::ResidualBlockId> prior_ids;
  prior_ids.push_back(problem.AddResidualBlock(&prior_cost, nullptr, th));
  for (int k = 0; k < n_node; ++k)
    prior_ids.push_back(problem.AddResidualBlock(&node_prior, nullptr, node_eff + k));
  for (int k = 0; k < n_place; ++k)
    prior_ids.push_back(problem.AddResidualBlock(&place_prior, nullptr, place_eff + k));
  prior_ids.push_back(problem.AddResidualBlock(&batch_prior, nullptr, batch_eff));
  for (int k = 0; k < n_cpl; ++k)
    prior_ids.push_back(problem.AddResidualBlock(&comp_prior, nullptr, comp_eff + k));

  for (int i = 0; i < kC; ++i) {
    double lo = kLogMin, hi = kLogMax;
    if (i == kKappa) lo = kKappaMin, hi = kKappaMax;
    if (i == kGamma) lo = kGammaMin, hi = kGammaMax;
    if (i == kZetaC) lo = -0.5, hi = 0.5;
    if (i == kOmega) lo = kOmegaMin, hi = 1.0;
    problem.SetParameterLowerBound(th, i, lo);
    problem.SetParameterUpperBound(th, i, hi);
  }
  for (int k = 0; k < n_node + n_place; ++k) {
    problem.SetParameterLowerBound(node_eff + k, 0, -kEffectMax);
    problem.SetParameterUpperBound(node_eff + k, 0, kEffectMax);
  }
  for (int k = 0; k < n_batch; ++k) {
    problem.SetParameterLowerBound(batch_eff, k, -kEffectMax);
    problem.SetParameterUpperBound(batch_eff, k, kEffectMax);
  }
  for (int k = 0; k < n_cpl; ++k) {
    problem.SetParameterLowerBound(comp_eff + k, 0, -kEffectMax);
    problem.SetParameterUpperBound(comp_eff + k, 0, kEffectMax);
  }

  ceres::Solver::Options so;
  so.linear_solver_type = ceres::SPARSE_NORMAL_CHOLESKY;
  so.jacobi_scaling = false;  // parameters are log times and O(1) effects: already scaled
  so.gradient_tolerance = 1e-14;
  so.parameter_tolerance = 1e-10;
  so.num_threads = 1;
  so.logging_type = ceres::SILENT;
  so.minimizer_progress_to_stdout = false;
  ceres::Solver::Summary summary;
  ceres::Solve(so, &problem, &summary);

  m.theta_ = theta;

  // Fit statistics on the step times.
  double ss = 0, sape = 0, ape_max = 0;
  for (const Row& r : rows) {
    double tc, step;
    Times(th, r.node_index >= 0 ? node_eff[r.node_index] + place_eff[r.place_index] : 0.0,
          batch_eff[r.batch_index] + comp_eff[r.compute_index], r.nodes, r.replicas, r.b,
          r.log_b_rel, r.accum, &tc, &step);
    const double lr = std::log(step) - r.log_step;
    ss += lr * lr;
    const double ape = std::abs(std::exp(lr) - 1.0);
    sape += ape;
    ape_max = std::max(ape_max, ape);
  }
  const int n = static_cast<int>(rows.size());

  // Uncertainty: Gauss-Newton information of the data and of the priors.
  m.identified_.assign(n_par, false);
  m.noise_sigma_ = options.obs_sigma;
  m.covariance_.assign(static_cast<size_t>(n_par) * n_par, 0.0);
  if (options.compute_uncertainty) {
    std::vector<double*> blocks;
    blocks.push_back(th);
    for (int k = 0; k < n_node + n_place; ++k) blocks.push_back(node_eff + k);
    blocks.push_back(batch_eff);
    for (int k = 0; k < n_cpl; ++k) blocks.push_back(comp_eff + k);
    auto info = [&](const std::vector<ceres::ResidualBlockId>& ids, double* cost) {
      ceres::Problem::EvaluateOptions eo;
      eo.residual_blocks = ids;
      eo.parameter_blocks = blocks;
      eo.apply_loss_function = true;
      ceres::CRSMatrix crs;
      problem.Evaluate(eo, cost, nullptr, nullptr, &crs);
      Eigen::MatrixXd h = Eigen::MatrixXd::Zero(n_par, n_par);
      std::vector<int> nz;
      for (int r = 0; r < crs.num_rows; ++r) {
        nz.clear();
        for (int a = crs.rows[r]; a < crs.rows[r + 1]; ++a)
          if (crs.values[a] != 0) nz.push_back(a);
        for (int a : nz)
          for (int b : nz) h(crs.cols[a], crs.cols[b]) += crs.values[a] * crs.values[b];
      }
      return h;
    };
    double cost_d = 0, cost_p = 0;
    const Eigen::MatrixXd hd = info(data_ids, &cost_d);
    const Eigen::MatrixXd hp = info(prior_ids, &cost_p);
    const Eigen::MatrixXd eye = Eigen::MatrixXd::Identity(n_par, n_par);
    const Eigen::MatrixXd post = (hd + hp).ldlt().solve(eye);
    int p_eff = 0;  // parameters the data identified
    for (int i = 0; i < n_par; ++i) {
      // Against the prior variance of parameter i given the others (1 / hp(i, i)): a parameter
      // tied by a prior to one the data pins (alpha_l to alpha_n) is not identified by that.
      m.identified_[i] = hp(i, i) > 0 && post(i, i) * hp(i, i) < options.identified_ratio;
      p_eff += m.identified_[i];
    }
    // Scatter of the data around the model relative to obs_sigma (reduced chi-square).
    const int n_res = n_data_res;
    // Shrunk towards 1 (the assumed obs_sigma) by kPriorDof pseudo-observations, so that a fit to
    // a handful of configurations does not claim a tiny scatter.
    constexpr double kPriorDof = 5;
    const double dof = std::max(0, n_res - p_eff);
    const double s2 = std::clamp((2.0 * cost_d + kPriorDof) / (dof + kPriorDof), 0.04, 100.0);
    for (int r = 0; r < n_par; ++r)
      for (int c = 0; c < n_par; ++c) m.covariance_[r * n_par + c] = s2 * post(r, c);
    const double ndof = std::max(0, n - p_eff);
    m.noise_sigma_ = std::max(
        0.005,
        std::sqrt((ss + kPriorDof * options.obs_sigma * options.obs_sigma) / (ndof + kPriorDof)));
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
  st.termination = ceres::TerminationTypeToString(summary.termination_type);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace cloudtune::estimator
