// The throughput model's evaluation: parameters, effects, covariance and predictions.
#include <ceres/jet.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "estimator/detail/throughput_form.h"
#include "estimator/throughput.h"

namespace cloudtune::estimator {

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
  if (!(growth_sigma >= 0) || !std::isfinite(growth_sigma))
    return fail("growth_sigma must be >= 0");
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

ThroughputModel ThroughputModel::Projected(const std::vector<double>& shift,
                                           const std::vector<double>& extra_cov) const {
  constexpr int kC = kNumThroughputParams;
  ThroughputModel m = *this;
  for (int i = 0; i < kC && i < static_cast<int>(shift.size()); ++i) m.theta_[i] += shift[i];
  if (m.cov_core_.empty()) m.cov_core_.assign(kC * kC, 0.0);
  for (int i = 0; i < kC * kC && i < static_cast<int>(extra_cov.size()); ++i)
    m.cov_core_[i] += extra_cov[i];
  for (int i = 0; i < kC; ++i) m.identified_.at(i) = false;  // rests on the projection's prior
  return m;
}

double ThroughputModel::param_sigma(int i) const {
  const double v = covariance(i, i);
  return v > 0 ? std::sqrt(v) : 0;
}

int ThroughputModel::NodeIndex(int num_nodes) const {
  const int k = detail::Find(node_counts_, num_nodes);
  return k < 0 ? -1 : kNumThroughputParams + k;
}
int ThroughputModel::BatchIndex(int local_bsz) const {
  const int k = detail::Find(batch_sizes_, local_bsz);
  return k < 0 ? -1 : kNumThroughputParams + static_cast<int>(node_counts_.size()) + 2 * k;
}
int ThroughputModel::SyncBatchIndex(int local_bsz) const {
  const int k = BatchIndex(local_bsz);
  return k < 0 ? -1 : k + 1;
}
int ThroughputModel::ComputeIndex(int num_nodes, int num_replicas) const {
  const int k = detail::Find(compute_placements_, std::make_pair(num_nodes, num_replicas));
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

int ThroughputModel::MaxReplicasSeen(bool local) const {
  int r_max = 0;
  for (const auto& [nn, rr] : compute_placements_)
    if (rr >= 2 && (nn <= 1) == local) r_max = std::max(r_max, rr);
  return r_max;
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
  // More replicas than the fit saw in this regime: the growth form's own uncertainty. A regime the
  // fit never saw rests on its priors, whose variance is already in the covariance.
  if (sync) {
    const int r_max = MaxReplicasSeen(!net);
    if (r_max >= 2 && replicas > r_max) {
      const double s = growth_sigma_ * std::log(double(replicas) / r_max) * step.v[kC] / step.a;
      var += s * s;
    }
  }
  p.log_sigma = std::sqrt(std::max(0.0, var * loo_variance_scale_));
  return p;
}

}  // namespace cloudtune::estimator
