// FitThroughput: the throughput model fitted to measured configurations with Ceres, and the
// posterior covariance of its parameters.
#include <ceres/ceres.h>

#include <Eigen/Dense>
#include <Eigen/SparseCholesky>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "estimator/core/error.h"
#include "estimator/core/stats.h"
#include "estimator/detail/selected_inverse.h"
#include "estimator/detail/start.h"
#include "estimator/detail/throughput_form.h"
#include "estimator/detail/throughput_residuals.h"
#include "estimator/detail/type_prior.h"
#include "estimator/throughput.h"

namespace cloudtune::estimator {
namespace detail {
namespace {

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
// Pseudo-observations at the assumed scale that shrink a scale the data estimate (the noise, the
// covariance's, the leave-one-out check's), so that a fit to a handful of configurations does not
// claim a tiny or a huge one.
constexpr double kPriorDof = 5;
// Largest leverage counted in the leave-one-out check (a fitted value the data pin down alone).
constexpr double kMaxLeverage = 0.95;

// What the starting point and the prior centres are computed from.
struct StartData {
  std::vector<double> tc_all, bs;           // compute time per micro-step and local batch size
  std::vector<double> sync_node, sync_net;  // exposed sync time: one machine, over the network
  std::vector<LinearSample> local_start, net_start;  // (features, all-reduce time)
};

// Per batch size: sum of log(compute per micro-step), count and sum of (GPUs per machine - 1).
struct ComputeSums {
  std::vector<double> sum, g1;
  std::vector<int> n;
};

// The configurations as rows of the fit (batch: index into batch_sizes), and the statistics of
// their compute and sync times.
void ReadRows(const std::vector<Measurement>& data, const std::vector<int>& batch_sizes,
              std::vector<Row>* rows, StartData* start, ComputeSums* sums) {
  const int n_batch = static_cast<int>(batch_sizes.size());
  rows->reserve(data.size());
  start->tc_all.reserve(data.size());
  start->bs.reserve(data.size());
  sums->sum.assign(n_batch, 0.0);
  sums->g1.assign(n_batch, 0.0);
  sums->n.assign(n_batch, 0);
  for (const auto& d : data) {
    Row r;
    r.nodes = std::max(1, d.key.num_nodes);
    r.replicas = std::max(1, d.key.num_replicas);
    r.accum = std::max(0, d.key.accum_steps);
    r.b = std::max(1, d.key.local_bsz);
    r.log_step = std::log(d.step_time);
    const int b = static_cast<int>(r.b);
    r.batch = Find(batch_sizes, b);
    rows->push_back(r);
    // sync_time = 0 with several replicas means "not measured" (e.g. Gavel's traces): such a
    // configuration constrains the step time only.
    if (r.replicas >= 2 && d.sync_time <= 0) continue;
    const double tc = std::max(d.step_time - d.sync_time, 1e-3 * d.step_time) / (r.accum + 1);
    sums->sum[r.batch] += std::log(tc);
    sums->n[r.batch] += 1;
    sums->g1[r.batch] += double(r.replicas) / r.nodes - 1.0;
    start->tc_all.push_back(tc);
    start->bs.push_back(r.b);
    if (r.replicas >= 2) {
      const double tn = InvertOverlap(d.sync_time, tc, kOmegaPrior);
      if (r.nodes == 1) {
        start->sync_node.push_back(d.sync_time);
        start->local_start.push_back({double(r.replicas - 2), 0.0, tn});
      } else {
        start->sync_net.push_back(d.sync_time);
        start->net_start.push_back(
            {RGrowth(r.replicas), (double(r.replicas) / r.nodes - 1.0) / (r.nodes - 1), tn});
      }
    }
  }
  if (start->tc_all.empty())  // no compute measurement at all: use the step times
    for (const auto& d : data) {
      start->tc_all.push_back(d.step_time / (std::max(0, d.key.accum_steps) + 1));
      start->bs.push_back(std::max(1, d.key.local_bsz));
    }
}

// Starting alpha_c and beta_c: a straight line through the compute times against the batch size
// where its slope is positive, else fractions of their median.
void StartCompute(const StartData& s, double tc_med, double b_ref, double* alpha0, double* beta0) {
  *alpha0 = 0.2 * tc_med;
  *beta0 = 0.8 * tc_med / b_ref;
  const std::vector<double>& tc_all = s.tc_all;
  const std::vector<double>& bs = s.bs;
  double sb = 0, st = 0, sbb = 0, sbt = 0;
  const double n = tc_all.size();
  for (size_t i = 0; i < tc_all.size(); ++i)
    sb += bs[i], st += tc_all[i], sbb += bs[i] * bs[i], sbt += bs[i] * tc_all[i];
  const double den = n * sbb - sb * sb;
  if (den > 1e-9 * n * sbb) {
    const double slope = (n * sbt - sb * st) / den;
    const double icpt = (st - slope * sb) / n;
    if (slope > 0) {
      *beta0 = slope;
      *alpha0 = std::max(icpt, 0.02 * tc_med);
    }
  }
}

// Scales of the all-reduce over the network and on one machine: medians of the exposed sync
// times, one derived from the other where it has none.
void StartSync(const StartData& s, double tc_med, double* alpha_n0, double* alpha_l0) {
  if (!s.sync_net.empty()) {
    *alpha_n0 = std::max(core::Median(s.sync_net, 0.0), 0.01 * tc_med);
    *alpha_l0 = s.sync_node.empty() ? kAlphaLRatio * *alpha_n0
                                    : std::max(core::Median(s.sync_node, 0.0), 1e-3 * tc_med);
  } else if (!s.sync_node.empty()) {
    *alpha_l0 = std::max(core::Median(s.sync_node, 0.0), 1e-3 * tc_med);
    *alpha_n0 = *alpha_l0 / kAlphaLRatio;
  } else {
    *alpha_n0 = 0.5 * tc_med;
    *alpha_l0 = kAlphaLRatio * *alpha_n0;
  }
}

// The core's starting point and its priors, from simple statistics of the data.
struct CoreStart {
  std::array<double, kC> theta{};
  std::vector<Prior> priors;
};

CoreStart StartCore(const StartData& s, double b_ref, double ps) {
  const double tc_med = core::Median(s.tc_all, 0.0);
  double alpha0, beta0, alpha_n0, alpha_l0;
  StartCompute(s, tc_med, b_ref, &alpha0, &beta0);
  StartSync(s, tc_med, &alpha_n0, &alpha_l0);
  CoreStart start;
  start.priors = {
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
  double* th = start.theta.data();
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
  if (FitPositiveLinear(s.net_start, 3, c)) {
    th[kAlphaN] = std::log(c[0]);
    th[kBetaN] = std::log(c[1] > 0 ? c[1] : kBetaNRatio * c[0]);
    th[kDeltaN] = std::log(c[2] > 0 ? c[2] : kDeltaNRatio * c[0]);
  }
  if (FitPositiveLinear(s.local_start, 2, c)) {
    th[kAlphaL] = std::log(c[0]);
    th[kBetaL] = std::log(c[1] > 0 ? c[1] : kBetaLRatio * c[0]);
  }
  th[kGamma] = 2.0;
  th[kZetaC] = 0.0;
  th[kOmega] = kOmegaPrior;
  for (int i = 0; i < kC; ++i)
    if (IsLogParam(i)) th[i] = std::clamp(th[i], kLogMin + 1, kLogMax - 1);
  return start;
}

// Bounds of core parameter i (log scale for the positive ones).
void CoreBounds(int i, double* lo, double* hi) {
  *lo = kLogMin, *hi = kLogMax;
  if (i == kKappa) *lo = kKappaMin, *hi = kKappaMax;
  if (i == kGamma) *lo = kGammaMin, *hi = kGammaMax;
  if (i == kZetaC) *lo = -0.5, *hi = 0.5;
  if (i == kOmega) *lo = kOmegaMin, *hi = 1.0;
}

ceres::Problem::Options ProblemOptions() {
  ceres::Problem::Options po;
  po.cost_function_ownership = ceres::DO_NOT_TAKE_OWNERSHIP;
  return po;
}

// Gauss-Newton information H = J'J of the data and the priors, in blocks: A (core x core), B (core
// x effects, dense), D (effects x effects, sparse: pairs that share a residual, as triplets).
struct Information {
  Information(int n_eff, size_t reserve) : bm(Eigen::MatrixXd::Zero(kC, n_eff)) {
    dt.reserve(reserve);
  }
  // Adds one data residual's J'J: gradient jc over the core and je over the effects eff.
  void Add(const double* jc, const int* eff, const double* je, int count) {
    Eigen::Map<const Eigen::Matrix<double, kC, 1>> g(jc);
    a.noalias() += g * g.transpose();
    for (int k = 0; k < count; ++k) {
      bm.col(eff[k] - kC) += g * je[k];
      for (int l = 0; l <= k; ++l) {
        const int i = std::max(eff[k], eff[l]) - kC, j = std::min(eff[k], eff[l]) - kC;
        dt.emplace_back(i, j, je[k] * je[l]);
      }
    }
  }

  Eigen::Matrix<double, kC, kC> a = Eigen::Matrix<double, kC, kC>::Zero();
  Eigen::MatrixXd bm;
  std::vector<Eigen::Triplet<double>> dt;
  Eigen::Matrix<double, kC, kC> hp;  // the core priors' part of A
  double cost_d = 0;                 // half the chi-square of the data residuals
};

}  // namespace
}  // namespace detail

using detail::ComputeCost;
using detail::CoreCache;
using detail::EffectPrior;
using detail::GroupCost;
using detail::kC;
using detail::kMaxLeverage;
using detail::kPriorDof;
using detail::PriorCost;
using detail::Row;

// The steps of FitThroughput, in the order Run() takes them; they share the fit's state.
class ThroughputModel::Fitter {
 public:
  Fitter(const std::vector<Measurement>& data, const ThroughputFitOptions& options,
         const detail::TypePrior* type_prior = nullptr)
      : data_(data),
        options_(options),
        type_prior_(type_prior),
        problem_(detail::ProblemOptions()),
        ordering_(std::make_shared<ceres::ParameterBlockOrdering>()) {}
  ThroughputModel Run();

 private:
  // The rows of one residual block and its parameter blocks (theta index of each; the core's
  // is 0).
  struct Group {
    int begin, count;
    std::vector<int> blocks;
  };

  void LayOutEffects();
  void SetUpCache();
  void GroupRows();
  void AddDataResiduals(const detail::ComputeSums& sums);
  void AddPriors(std::vector<detail::Prior> priors);
  void AddEffectPrior(int index, int size, double sigma0, double sigma1, int group);
  ceres::Solver::Summary Solve();
  void FitStatistics();
  void AddDataInformation(detail::Information* info);
  void AddPriorInformation(detail::Information* info);
  void Posterior(detail::Information* info);
  void LeaveOneOutCheck();
  int Identify(const Eigen::Matrix<double, kC, kC>& post_core,
               const Eigen::Matrix<double, kC, kC>& hp, const std::vector<double>& post_eff);
  void SetStats(const ceres::Solver::Summary& summary);

  const std::vector<Measurement>& data_;
  const ThroughputFitOptions& options_;
  const detail::TypePrior* type_prior_;  // null: priors from the data's own statistics
  ThroughputModel m_;
  int n_node_ = 0, n_batch_ = 0;
  int n_par_ = 0, n_eff_ = 0;  // parameters in theta, of which effects
  std::vector<Row> rows_;
  std::vector<double> theta_;
  ceres::Problem problem_;
  CoreCache cache_;
  std::vector<Group> groups_;
  std::deque<GroupCost> group_costs_;  // not copyable: a deque constructs in place
  std::deque<ComputeCost> comp_costs_;
  int n_data_res_ = 0;  // data residuals
  std::unique_ptr<ceres::AutoDiffCostFunction<PriorCost, ceres::DYNAMIC, kC>> prior_cost_;
  int num_priors_ = 0;
  std::vector<double> effect_inv_;  // 1 / prior sigma of each effect
  std::shared_ptr<ceres::ParameterBlockOrdering> ordering_;
  std::deque<EffectPrior> effect_priors_;
  // Sum of squared log residuals, of absolute relative errors, and the largest of these, of the
  // fitted step times.
  double ss_ = 0, sape_ = 0, ape_max_ = 0;
};

ThroughputModel ThroughputModel::Fitter::Run() {
  std::string err;
  if (!options_.IsValid(&err)) throw InputError("throughput fit options: " + err);
  if (data_.empty()) throw InputError("throughput fit: no measurements");
  LayOutEffects();
  if (type_prior_) m_.b_ref_ = type_prior_->b_ref;
  detail::StartData start_data;
  detail::ComputeSums sums;
  detail::ReadRows(data_, m_.batch_sizes_, &rows_, &start_data, &sums);
  detail::CoreStart start = detail::StartCore(start_data, m_.b_ref_, options_.prior_scale);
  if (type_prior_) {  // centred on another type's model instead
    start.priors.clear();
    for (const auto& t : type_prior_->terms) start.priors.push_back({t.a, t.b, t.mean, t.sigma});
    for (int i = 0; i < detail::kC; ++i) {
      double lo, hi;
      detail::CoreBounds(i, &lo, &hi);
      start.theta[i] = std::clamp(type_prior_->start[i], lo + 1e-6, hi - 1e-6);
    }
  }
  theta_.assign(n_par_, 0.0);
  std::copy(start.theta.begin(), start.theta.end(), theta_.begin());
  SetUpCache();
  GroupRows();
  AddDataResiduals(sums);
  AddPriors(std::move(start.priors));
  const ceres::Solver::Summary summary = Solve();
  m_.theta_ = theta_;
  FitStatistics();
  // Uncertainty: the posterior covariance H^-1 of the Gauss-Newton information H = J'J, via the
  // Schur complement on the core, S = A - B D^-1 B' (see detail::Information).
  m_.identified_.assign(n_par_, false);
  m_.noise_sigma_ = options_.obs_sigma;
  if (options_.compute_uncertainty) {
    detail::Information info(n_eff_, rows_.size() * 15 + comp_costs_.size() + 2 * n_eff_);
    AddDataInformation(&info);
    AddPriorInformation(&info);
    Posterior(&info);
    if (options_.loo_widening) LeaveOneOutCheck();
  }
  SetStats(summary);
  return std::move(m_);
}

// Distinct node counts and placements (N >= 2, with >= 2 replicas), batch sizes and placements
// (any) get an effect each.
void ThroughputModel::Fitter::LayOutEffects() {
  double sum_lb = 0;
  for (const auto& d : data_) {
    if (!(d.step_time > 0) || !std::isfinite(d.step_time))
      throw InputError("throughput fit: step_time must be positive");
    sum_lb += std::log(std::max(1, d.key.local_bsz));
    if (d.key.num_nodes >= 2 && d.key.num_replicas >= 2) {
      m_.node_counts_.push_back(d.key.num_nodes);
      m_.placements_.emplace_back(d.key.num_nodes, d.key.num_replicas);
    }
    m_.batch_sizes_.push_back(std::max(1, d.key.local_bsz));
    m_.compute_placements_.emplace_back(std::max(1, d.key.num_nodes),
                                        std::max(1, d.key.num_replicas));
  }
  auto unique = [](auto* v) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  };
  unique(&m_.node_counts_);
  unique(&m_.batch_sizes_);
  unique(&m_.placements_);
  unique(&m_.compute_placements_);
  n_node_ = static_cast<int>(m_.node_counts_.size());
  n_batch_ = static_cast<int>(m_.batch_sizes_.size());
  // theta = [core | node | per batch size: batch, sync_batch | per (N, R): compute[, placement]].
  n_par_ = kC + n_node_ + 2 * n_batch_;
  for (const auto& [nn, rr] : m_.compute_placements_) {
    m_.block_offset_.push_back(n_par_);
    n_par_ += nn >= 2 && rr >= 2 ? 2 : 1;
  }
  n_eff_ = n_par_ - kC;
  m_.b_ref_ = std::exp(sum_lb / data_.size());
  const double ps = options_.prior_scale;
  m_.node_effect_sigma_ = options_.node_effect_sigma * ps;
  m_.placement_effect_sigma_ = options_.placement_effect_sigma * ps;
  m_.batch_effect_sigma_ = options_.batch_effect_sigma * ps;
  m_.compute_effect_sigma_ = options_.compute_effect_sigma * ps;
  m_.sync_batch_effect_sigma_ = options_.sync_batch_effect_sigma * ps;
  m_.growth_sigma_ = options_.growth_sigma;
}

void ThroughputModel::Fitter::SetUpCache() {
  for (int k = 0; k < n_batch_; ++k) {
    cache_.b.push_back(m_.batch_sizes_[k]);
    cache_.log_b_rel.push_back(std::log(m_.batch_sizes_[k] / m_.b_ref_));
  }
  for (auto* v : {&cache_.bk, &cache_.tc0, &cache_.log_tc0}) v->assign(n_batch_, 0.0);
  cache_.batch_exp.assign(n_batch_, {std::nan(""), std::nan(""), 0.0, 0.0});
}

// Rows of one placement, by batch size, in groups (kMaxSlots, kMaxGroup): one residual block each.
void ThroughputModel::Fitter::GroupRows() {
  using detail::kMaxGroup;
  using detail::kMaxSlots;
  std::vector<Row>& rows = rows_;
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.nodes, a.replicas, a.batch) < std::tie(b.nodes, b.replicas, b.batch);
  });
  for (size_t i = 0; i < rows.size();) {
    size_t e = i + 1;
    for (int slots = 1; e < rows.size() && e - i < size_t(kMaxGroup) &&
                        rows[e].nodes == rows[i].nodes && rows[e].replicas == rows[i].replicas;
         ++e)
      if (rows[e].batch != rows[e - 1].batch && ++slots > kMaxSlots) break;
    Group g{static_cast<int>(i), static_cast<int>(e - i), {0}};
    const Row& r = rows[i];
    if (r.nodes >= 2 && r.replicas >= 2) g.blocks.push_back(m_.NodeIndex(r.nodes));
    g.blocks.push_back(m_.ComputeIndex(r.nodes, r.replicas));
    for (size_t k = i; k < e; ++k) {
      const int bi = m_.BatchIndex(m_.batch_sizes_[rows[k].batch]);
      if (g.blocks.back() != bi) g.blocks.push_back(bi);
      rows[k].slot = static_cast<int>(g.blocks.size()) - (r.nodes >= 2 && r.replicas >= 2 ? 4 : 3);
    }
    groups_.push_back(std::move(g));
    i = e;
  }
}

// One residual block per group of rows, and one per batch size with measured compute times.
void ThroughputModel::Fitter::AddDataResiduals(const detail::ComputeSums& sums) {
  double* th = theta_.data();
  std::vector<double*> blocks;
  for (const Group& g : groups_) {
    const int slots = static_cast<int>(g.blocks.size()) -
                      (rows_[g.begin].nodes >= 2 && rows_[g.begin].replicas >= 2 ? 3 : 2);
    group_costs_.emplace_back(&rows_[g.begin], g.count, slots, 1.0 / options_.obs_sigma,
                              options_.huber_k, &cache_);
    blocks.clear();
    for (int b : g.blocks) blocks.push_back(th + b);
    problem_.AddResidualBlock(&group_costs_.back(), nullptr, blocks);
  }
  if (options_.compute_weight > 0)
    for (int k = 0; k < n_batch_; ++k) {
      if (sums.n[k] == 0) continue;  // no compute measurement at this batch size
      comp_costs_.emplace_back(
          ComputeCost::Item{k, sums.sum[k] / sums.n[k],
                            std::sqrt(sums.n[k] * options_.compute_weight) / options_.obs_sigma,
                            sums.g1[k] / sums.n[k]},
          options_.huber_k, &cache_);
      problem_.AddResidualBlock(&comp_costs_.back(), nullptr, th,
                                th + m_.BatchIndex(m_.batch_sizes_[k]));
    }
  n_data_res_ = static_cast<int>(rows_.size() + comp_costs_.size());
}

// The core's priors and bounds; each effect: a zero-mean prior with its kind's sigma, and bounds.
// The (N, R) blocks form the first elimination group of the Schur solver: no configuration
// touches two of them.
void ThroughputModel::Fitter::AddPriors(std::vector<detail::Prior> priors) {
  double* th = theta_.data();
  auto* prior = new PriorCost;
  prior->priors = std::move(priors);
  num_priors_ = static_cast<int>(prior->priors.size());
  prior_cost_ = std::make_unique<ceres::AutoDiffCostFunction<PriorCost, ceres::DYNAMIC, kC>>(
      prior, num_priors_);
  problem_.AddResidualBlock(prior_cost_.get(), nullptr, th);
  effect_inv_.assign(n_eff_, 0.0);
  for (int k = 0; k < n_node_; ++k) AddEffectPrior(kC + k, 1, m_.node_effect_sigma_, 0, 1);
  for (int k = 0; k < n_batch_; ++k)
    AddEffectPrior(kC + n_node_ + 2 * k, 2, m_.batch_effect_sigma_, m_.sync_batch_effect_sigma_, 1);
  for (size_t k = 0; k < m_.compute_placements_.size(); ++k) {
    const auto [nn, rr] = m_.compute_placements_[k];
    AddEffectPrior(m_.block_offset_[k], nn >= 2 && rr >= 2 ? 2 : 1, m_.compute_effect_sigma_,
                   m_.placement_effect_sigma_, 0);
  }
  ordering_->AddElementToGroup(th, 1);
  for (int i = 0; i < kC; ++i) {
    double lo, hi;
    detail::CoreBounds(i, &lo, &hi);
    problem_.SetParameterLowerBound(th, i, lo);
    problem_.SetParameterUpperBound(th, i, hi);
  }
}

void ThroughputModel::Fitter::AddEffectPrior(int index, int size, double sigma0, double sigma1,
                                             int group) {
  effect_priors_.emplace_back(sigma0, sigma1, size);
  double* p = theta_.data() + index;
  problem_.AddResidualBlock(&effect_priors_.back(), nullptr, p);
  for (int i = 0; i < size; ++i) {
    effect_inv_[index - kC + i] = effect_priors_.back().inv(i);
    problem_.SetParameterLowerBound(p, i, -detail::kEffectMax);
    problem_.SetParameterUpperBound(p, i, detail::kEffectMax);
  }
  ordering_->AddElementToGroup(p, group);
}

ceres::Solver::Summary ThroughputModel::Fitter::Solve() {
  ceres::Solver::Options so;
  // Dense reduced system while it is small (the core and the node and batch effects: 50 numbers
  // for bench_fit's 16 batch sizes, <= 58 on the Pollux traces), sparse beyond: a dense one of 200
  // took 0.3 MB, which made a fit of 100 all-distinct configurations hold 81x its input (49x now).
  so.linear_solver_type =
      kC + n_node_ + 2 * n_batch_ <= 64 ? ceres::DENSE_SCHUR : ceres::SPARSE_SCHUR;
  so.linear_solver_ordering = ordering_;
  so.jacobi_scaling = false;  // already scaled (see below)
  so.max_num_iterations = options_.max_iterations;
  so.function_tolerance = options_.function_tolerance;
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
  detail::CostChangeStop stop(options_.cost_tolerance);
  so.callbacks.push_back(&stop);
  ceres::Solve(so, &problem_, &summary);
  return summary;
}

// Fit statistics on the step times.
void ThroughputModel::Fitter::FitStatistics() {
  const double* th = theta_.data();
  std::vector<double> log_step_fit(rows_.size(), std::nan(""));
  {
    std::vector<double> res(detail::kMaxGroup);
    std::vector<const double*> params;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      params.clear();
      for (int b : groups_[gi].blocks) params.push_back(th + b);
      GroupCost& f = group_costs_[gi];
      f.set_log_step_out(&log_step_fit[groups_[gi].begin]);
      f.Evaluate(params.data(), res.data(), nullptr);
      f.set_log_step_out(nullptr);
    }
  }
  for (size_t i = 0; i < rows_.size(); ++i) {
    const double lr = log_step_fit[i] - rows_[i].log_step;
    ss_ += lr * lr;
    const double ape = std::abs(std::exp(lr) - 1.0);
    sape_ += ape;
    ape_max_ = std::max(ape_max_, ape);
  }
}

// The data residuals' J'J at the fitted theta, and their cost.
void ThroughputModel::Fitter::AddDataInformation(detail::Information* info) {
  const double* th = theta_.data();
  std::vector<double> res(detail::kMaxGroup), jbuf;
  std::vector<double*> jac;
  std::vector<const double*> params;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    const GroupCost& f = group_costs_[gi];
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
      info->cost_d += 0.5 * res[i] * res[i];
      int eff[5], n_e = 0;
      double je[5];
      auto add_block = [&](int k) {
        for (int c = 0; c < sizes[k]; ++c) {
          eff[n_e] = g.blocks[k] + c;
          je[n_e++] = jac[k][i * sizes[k] + c];
        }
      };
      for (int k = 1; k < fixed; ++k) add_block(k);
      add_block(fixed + rows_[g.begin + i].slot);
      info->Add(jac[0] + i * kC, eff, je, n_e);
    }
  }
  for (const ComputeCost& c : comp_costs_) {
    const int eff = m_.BatchIndex(m_.batch_sizes_[c.batch()]);
    double jc[kC], je[2], r;
    double* j[2] = {jc, je};
    const double* pp[2] = {th, th + eff};
    c.Evaluate(pp, &r, j);
    info->cost_d += 0.5 * r * r;
    info->Add(jc, &eff, je, 1);
  }
}

// Priors: the core's (autodiff) and one per effect.
void ThroughputModel::Fitter::AddPriorInformation(detail::Information* info) {
  {
    std::vector<double> r(num_priors_), j(num_priors_ * kC);
    double* jp[1] = {j.data()};
    const double* pp[1] = {theta_.data()};
    prior_cost_->Evaluate(pp, r.data(), jp);
    Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, kC, Eigen::RowMajor>> jm(
        j.data(), num_priors_, kC);
    info->hp = jm.transpose() * jm;
    info->a += info->hp;
  }
  for (int e = 0; e < n_eff_; ++e) info->dt.emplace_back(e, e, effect_inv_[e] * effect_inv_[e]);
}

// The posterior covariance, the identified flags and the noise scale from the information.
void ThroughputModel::Fitter::Posterior(detail::Information* info) {
  const Eigen::MatrixXd& bm = info->bm;
  Eigen::SparseMatrix<double> dm(n_eff_, n_eff_);
  dm.setFromTriplets(info->dt.begin(), info->dt.end());
  std::vector<Eigen::Triplet<double>>().swap(info->dt);
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower> ldlt(dm);
  if (ldlt.info() != Eigen::Success) return;
  const Eigen::MatrixXd x = ldlt.solve(bm.transpose());  // D^-1 B', n_eff x kC
  const Eigen::Matrix<double, kC, kC> s = info->a - bm * x;
  const Eigen::Matrix<double, kC, kC> post_core =
      s.ldlt().solve(Eigen::Matrix<double, kC, kC>::Identity());
  const Eigen::MatrixXd xs = x * post_core;  // n_eff x kC; cross covariance = -xs'
  // Effect pairs: (D^-1)_ij + x_i S^-1 x_j' for the pairs in D's pattern (column j, rows i >= j).
  std::vector<EffectPair> pairs;
  std::vector<double> post_eff(n_eff_, 0.0);
  const detail::SelectedInverse d_inv(ldlt);
  for (int j = 0; j < n_eff_; ++j) {
    for (Eigen::SparseMatrix<double>::InnerIterator it(dm, j); it; ++it) {
      const int i = static_cast<int>(it.row());
      const double v = d_inv(i, j) + xs.row(i).dot(x.row(j));
      pairs.push_back({j, i, v});
      if (i == j) post_eff[j] = v;
    }
  }
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& p, const auto& q) { return std::tie(p.a, p.b) < std::tie(q.a, q.b); });
  const int p_eff = Identify(post_core, info->hp, post_eff);
  // Scatter of the data around the model relative to obs_sigma (reduced chi-square), shrunk
  // towards 1 (the assumed obs_sigma) by kPriorDof pseudo-observations.
  const double dof = std::max(0, n_data_res_ - p_eff);
  const double s2 = std::clamp((2.0 * info->cost_d + kPriorDof) / (dof + kPriorDof), 0.04, 100.0);
  m_.cov_core_.resize(kC * kC);
  for (int r = 0; r < kC; ++r)
    for (int c = 0; c < kC; ++c) m_.cov_core_[r * kC + c] = s2 * post_core(r, c);
  m_.cov_cross_.resize(size_t(kC) * n_eff_);
  for (int r = 0; r < kC; ++r)
    for (int e = 0; e < n_eff_; ++e) m_.cov_cross_[size_t(r) * n_eff_ + e] = -s2 * xs(e, r);
  for (auto& p : pairs) p.v *= s2;
  m_.cov_pairs_ = std::move(pairs);
  const int n = static_cast<int>(rows_.size());
  const double ndof = std::max(0, n - p_eff);
  m_.noise_sigma_ = std::max(
      0.005,
      std::sqrt((ss_ + kPriorDof * options_.obs_sigma * options_.obs_sigma) / (ndof + kPriorDof)));
  // The spread of each kind of effect the fit found stands for the values it has not seen (what a
  // prediction adds for an unseen node count, batch size or placement): one EM step for a random
  // effect's variance, the mean of E[theta^2 | data] = theta^2 + Var(theta | data) over the kind's
  // effects, shrunk towards the prior's variance by kPriorDof pseudo-effects.
  std::vector<double> sum(5, 0.0), count(5, 0.0);
  auto add = [&](int kind, int index) {
    const int e = index - kC;
    sum[kind] += theta_[index] * theta_[index] + s2 * post_eff[e];
    count[kind] += 1;
  };
  for (int k = 0; k < n_node_; ++k) add(0, kC + k);
  for (int k = 0; k < n_batch_; ++k) add(1, kC + n_node_ + 2 * k), add(2, kC + n_node_ + 2 * k + 1);
  for (size_t k = 0; k < m_.compute_placements_.size(); ++k) {
    add(3, m_.block_offset_[k]);
    const auto [nn, rr] = m_.compute_placements_[k];
    if (nn >= 2 && rr >= 2) add(4, m_.block_offset_[k] + 1);
  }
  double* sigmas[5] = {&m_.node_effect_sigma_, &m_.batch_effect_sigma_,
                       &m_.sync_batch_effect_sigma_, &m_.compute_effect_sigma_,
                       &m_.placement_effect_sigma_};
  for (int kind = 0; kind < 5; ++kind) {
    const double prior = *sigmas[kind];
    *sigmas[kind] = std::sqrt((sum[kind] + kPriorDof * prior * prior) / (count[kind] + kPriorDof));
  }
}

// ThroughputFitOptions::loo_widening. For a linear model with Gaussian noise sigma^2 and a fitted
// value of posterior variance v (leverage h = v / sigma^2), leaving a configuration out moves its
// prediction so that it errs by e = r / (1 - h) (r: its residual in the fit) with a stated
// variance sigma^2 + v / (1 - h); e^2 over that has mean 1 when the stated variance is right. The
// model is non-linear and robust, so this is the local (Gauss-Newton) version of it; a brute-force
// leave-one-out refit on a synthetic misfit agrees with it within about 10 %.
void ThroughputModel::Fitter::LeaveOneOutCheck() {
  constexpr size_t kMaxRows = 128;  // evenly spaced rows: a mean of z^2 within ~13 %
  const size_t n = data_.size(), stride = std::max<size_t>(1, (n + kMaxRows - 1) / kMaxRows);
  const double s2 = m_.noise_sigma_ * m_.noise_sigma_;
  if (!(s2 > 0)) return;
  double sum_z2 = 0, count = 0;
  for (size_t i = 0; i < n; i += stride) {
    const StepPrediction p = m_.Predict(data_[i].key);
    if (!(p.step_time > 0) || !std::isfinite(p.log_sigma)) continue;
    const double v = std::max(0.0, p.log_sigma * p.log_sigma - s2);
    const double h = std::min(kMaxLeverage, v / s2);
    // data_[i]'s own step time: rows_ are sorted by placement (GroupRows), data_ are as given.
    const double e = std::log(data_[i].step_time / p.step_time) / (1 - h);
    sum_z2 += e * e / (s2 + v / (1 - h));
    count += 1;
  }
  // Shrunk towards 1 by kPriorDof pseudo-rows (as the noise scale in Posterior).
  m_.loo_variance_scale_ = std::max(1.0, (sum_z2 + kPriorDof) / (count + kPriorDof));
}

// Sets the identified flags; returns the number of parameters the data identified.
int ThroughputModel::Fitter::Identify(const Eigen::Matrix<double, kC, kC>& post_core,
                                      const Eigen::Matrix<double, kC, kC>& hp,
                                      const std::vector<double>& post_eff) {
  int p_eff = 0;
  for (int i = 0; i < kC; ++i) {
    // Against the prior variance of parameter i given the others (1 / hp(i, i)): a parameter
    // tied by a prior to one the data pins (alpha_l to alpha_n) is not identified by that.
    m_.identified_[i] = hp(i, i) > 0 && post_core(i, i) * hp(i, i) < options_.identified_ratio;
    p_eff += m_.identified_[i];
  }
  for (int e = 0; e < n_eff_; ++e) {
    const double inv2 = effect_inv_[e] * effect_inv_[e];
    m_.identified_[kC + e] = post_eff[e] * inv2 < options_.identified_ratio;
    p_eff += m_.identified_[kC + e];
  }
  return p_eff;
}

void ThroughputModel::Fitter::SetStats(const ceres::Solver::Summary& summary) {
  const bool converged = summary.termination_type == ceres::CONVERGENCE ||
                         summary.termination_type == ceres::USER_SUCCESS;
  const int n = static_cast<int>(rows_.size());
  auto& st = m_.stats_;
  st.configurations = n;
  st.residuals = n_data_res_;
  st.iterations = static_cast<int>(summary.iterations.size()) - 1;
  st.initial_cost = summary.initial_cost;
  st.final_cost = summary.final_cost;
  st.rms_log_step = std::sqrt(ss_ / n);
  st.mape_step = sape_ / n;
  st.max_ape_step = ape_max_;
  // USER_SUCCESS is the cost_tolerance stop (CostChangeStop): converged, as Ceres' own tests.
  st.termination =
      converged ? "CONVERGENCE" : ceres::TerminationTypeToString(summary.termination_type);
}

ThroughputModel FitThroughput(const std::vector<Measurement>& data,
                              const ThroughputFitOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  ThroughputModel m = ThroughputModel::Fitter(data, options).Run();
  m.stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

ThroughputModel FitThroughputWithPrior(const std::vector<Measurement>& data,
                                       const ThroughputFitOptions& options,
                                       const detail::TypePrior& prior) {
  const auto t0 = std::chrono::steady_clock::now();
  ThroughputModel m = ThroughputModel::Fitter(data, options, &prior).Run();
  m.stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace cloudtune::estimator
