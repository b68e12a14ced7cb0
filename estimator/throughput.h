// Throughput (parallel efficiency) model: predicts compute, all-reduce and step time of a
// configuration, fitted to measured configurations with Ceres.
//
// CONTRACT used by search/ and plugin/ (keep these signatures; add freely):
//   ThroughputFitOptions opts;  std::string err;  opts.IsValid(&err);
//   ThroughputModel m = FitThroughput(measurements, opts);
//   StepPrediction p = m.Predict(key, gpus_per_node);
//   nlohmann::json j = m.ToJson();  ThroughputModel m2 = ThroughputModel::FromJson(j, "name");
//
// Model form (b = local batch, s = accum_steps, R = replicas, N = nodes, g = R/N):
//   compute     T_c = (alpha_c + beta_c * b * (b / b_ref)^(kappa - 1))
//                     * exp(batch_effect[b] + compute_effect[N, R] + zeta_c * (g - 1))
//                     (zeta_c: GPUs of one machine contend for PCIe, CPU and data loading)
//                     (kappa < 1: the GPU is under-used at small b; kappa > 1: super-linear)
//   all-reduce  T_n = 0                                               R = 1
//                   = (alpha_l + beta_l * (R - 2)) * exp(sync_batch_effect[b])      N = 1, R >= 2
//                   = (alpha_n + beta_n * log(R / 2) + delta_n * (g - 1) / (N - 1))
//                     * exp(node_effect[N] + placement_effect[N, R] + sync_batch_effect[b]) N >= 2
//   overlap     T   = T_c + T_n - softmin(omega * T_c, T_n)             gamma >= 1, 0 < omega <= 1
//                     softmin(a, c) = (a^-gamma + c^-gamma)^(-1/gamma): the all-reduce hides behind
//                     at most the fraction omega of the compute (the backward pass); a small T_n
//                     is mostly hidden, a large one exposed beyond omega * T_c
//   step        T_step = s * T_c + T;  exposed sync = T - T_c;  compute = (s + 1) * T_c.
// batch_effect[b], node_effect[N], placement_effect[N, R], compute_effect[N, R] and
// sync_batch_effect[b] are random effects (one per batch size, node count and (N, R) pair seen in
// the data, shrunk towards 0 by a prior; compute_effect also for N = 1): they absorb what the
// smooth form misses (kernel choices at some batch sizes, network topology at some node counts and
// placements, an all-reduce that the backward pass of some batch sizes hides worse or better);
// unseen values use 0 and the prior's variance. Fitted on log(step time) of every configuration and
// log(compute time) per batch size, with a Huber loss, weak log-normal priors (so that parameters
// the data cannot identify stay sensible) and bounds.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "estimator/core/trace.h"

namespace cloudtune::estimator {

namespace detail {
struct TypePrior;  // priors of one instance type's fit from another type's model (throughput_types)
}

// A prediction for one configuration. Times in seconds.
struct StepPrediction {
  double compute_time = 0;  // per micro-step compute time on one worker
  double sync_time = 0;     // all-reduce time not hidden by overlap
  double step_time = 0;     // seconds per optimizer step (accumulation included)
  double throughput = 0;    // samples per second = global_batch / step_time
  // One standard deviation of log(step_time): a relative uncertainty (0.05 = ~5%). Grows when the
  // configuration lies outside what the fit saw (extrapolation: an unseen node count, placement or
  // batch size; more replicas than the fit saw, by ThroughputFitOptions::growth_sigma) or the
  // parameter was unidentified.
  double log_sigma = 0;
};

// The model's core parameters, in this order everywhere (JSON, covariance, identified flags);
// per-node-count and per-batch-size effects follow them in theta() and the covariance.
enum ThroughputParam : int {
  kAlphaC = 0,  // s         compute time of a micro-step independent of the batch
  kBetaC,       // s/sample  compute time per sample at b = b_ref
  kKappa,       // 1         exponent of the batch term (1 = linear)
  kAlphaL,      // s         all-reduce time of 2 replicas on one machine
  kBetaL,       // s         extra all-reduce time per additional replica on one machine
  kAlphaN,      // s         all-reduce time of 2 replicas over the network
  kBetaN,       // s         all-reduce time growth with log(R/2) over the network
  kDeltaN,      // s         extra all-reduce time per additional GPU sharing a NIC (at N = 2)
  kGamma,       // 1         sharpness of the overlap (1 = smooth, large = a hard min)
  kZetaC,       // 1         log slow-down of compute per additional GPU sharing a machine
  kOmega,       // 1         fraction of the compute time an all-reduce can hide behind (0, 1]
  kNumThroughputParams
};
// The core parameters' names (as in MODEL.json) and units.
const char* ThroughputParamName(int i);
const char* ThroughputParamUnit(int i);

struct ThroughputFitOptions {
  // Assumed standard deviation of log(time) of one configuration's measurement. Weighs the data
  // against the priors (larger = priors matter more). Must be > 0.
  double obs_sigma = 0.05;
  // Huber threshold in units of obs_sigma: residuals beyond it count linearly (robust to
  // outliers). 0 = plain least squares. Must be >= 0.
  double huber_k = 1.0;
  // Weight of the log(compute time) residuals relative to the log(step time) ones (the traces give
  // both; compute time pins T_c down). 0 = fit step time only. Must be >= 0.
  double compute_weight = 0.5;
  // Multiplies the standard deviations of every prior (larger = weaker priors). Must be > 0.
  double prior_scale = 1.0;
  // Prior standard deviations of the random effects (log multipliers): per node count and per
  // (num_nodes, num_replicas) placement on the all-reduce time, per batch size on the compute
  // time. Smaller = closer to the smooth form. The node-count effects fitted on the Pollux traces
  // spread over about +-0.2, the others over about +-0.1. Must be > 0.
  double node_effect_sigma = 0.2;
  double placement_effect_sigma = 0.1;
  double batch_effect_sigma = 0.1;
  // Prior standard deviation of the per-(num_nodes, num_replicas) log multiplier of the compute
  // time (data loading, PCIe and CPU contention particular to a placement; shows at large
  // batches, where the all-reduce is hidden). Must be > 0.
  // All five are the fit's priors; a prediction for a value the fit has not seen uses each kind's
  // spread as the fit found it, these shrunk towards the prior (ThroughputModel's *_effect_sigma).
  double compute_effect_sigma = 0.05;
  // Prior standard deviation of the per-batch-size log multiplier of the all-reduce time (how much
  // of it the backward pass of that batch size hides, gradient bucketing). Must be > 0.
  double sync_batch_effect_sigma = 0.1;
  // Standard deviation of the growth exponent p of the all-reduce time beyond the largest replica
  // count the fit saw in that regime (one machine, or over the network): T_n(R) = T_n(R_max) *
  // (R/R_max)^p, p between 0 (a bandwidth-bound ring: flat) and 1 (latency-bound: linear in R).
  // The smooth forms extrapolate one point of that family; the unmodelled rest adds
  // (growth_sigma * log(R/R_max) * dlog(step)/dlog(T_n))^2 to a prediction's log variance.
  // 0.29 = the standard deviation of p uniform on [0, 1]. Must be >= 0 (0 = off).
  double growth_sigma = 0.29;
  // Posterior variance / prior variance given the other parameters, below which a parameter counts
  // as identified by the data. Must be in (0, 1).
  double identified_ratio = 0.25;
  // Dogleg trust-region iteration cap and relative cost tolerance (stop when an iteration lowers
  // the cost by less than this fraction; the cost is ~ configurations / 2, so 1e-6 is far below
  // one unit of chi-square). max_iterations >= 1, function_tolerance > 0.
  int max_iterations = 200;
  double function_tolerance = 1e-6;
  // Also stop once an iteration lowers the cost (half the chi-square of the residuals in units of
  // obs_sigma) by less than this, absolute. 0.01 is far below one unit of chi-square; it ends the
  // slow crawl along directions the data hardly constrain. 0 = function_tolerance only. >= 0.
  double cost_tolerance = 0.01;
  // Compute the parameter covariance (for log_sigma and identified flags).
  bool compute_uncertainty = true;
  // Check the stated uncertainty against the fit's own leave-one-out errors and widen it where
  // they are larger: a form that misfits the data (a shape no smooth term has, placements out of
  // order) shows as leave-one-out errors beyond the stated variance, which the fitted parameters'
  // covariance and the noise scale do not see. The factor (ThroughputModel::loo_variance_scale)
  // is the mean squared leave-one-out error over the predicted variance, shrunk towards 1, and
  // never below 1: leaving one configuration out keeps its neighbours (the same placement at other
  // batch sizes), so it is the optimistic side of holding out what a job has not run. Needs
  // compute_uncertainty.
  bool loo_widening = true;

  bool IsValid(std::string* error) const;
};

// What the fit did.
struct ThroughputFitStats {
  int configurations = 0;   // configurations fitted
  int residuals = 0;        // data residuals (step per configuration + compute per batch)
  int iterations = 0;       // solver iterations
  double seconds = 0;       // wall time of the fit
  double initial_cost = 0;  // Ceres cost at the start and the end
  double final_cost = 0;
  double rms_log_step = 0;  // RMS of log(predicted/measured step time) on the fitted data
  double mape_step = 0;     // mean |predicted - measured| / measured step time (fitted data)
  double max_ape_step = 0;  // worst of the above
  std::string termination;  // Ceres termination type
};

class ThroughputModel {
 public:
  // gpus_per_node: GPUs per machine of the configuration (0 = unknown: assume the replicas are
  // spread evenly over num_nodes). Used only when key.num_nodes < 1 (num_nodes is then derived
  // as ceil(num_replicas / gpus_per_node)).
  StepPrediction Predict(const ConfigKey& key, int gpus_per_node = 0) const;
  nlohmann::json ToJson() const;
  // Throws cloudtune::InputError naming `source` and the field on a malformed or foreign model.
  static ThroughputModel FromJson(const nlohmann::json& j, const std::string& source);

  // Parameter value in its natural unit (see ThroughputParam).
  double param(int i) const;
  // Whether the data identified parameter i (false: it rests on its prior).
  bool identified(int i) const { return identified_.at(i); }
  // Posterior standard deviation of the parameter, relative for positive parameters (log scale),
  // absolute for kappa and gamma.
  double param_sigma(int i) const;
  double b_ref() const { return b_ref_; }
  // Scatter of a single configuration's log(step time) around the model (used in log_sigma).
  double noise_sigma() const { return noise_sigma_; }
  // Factor (>= 1) on the variance of every prediction's log step time from the fit's
  // leave-one-out check (ThroughputFitOptions::loo_widening); 1 = the stated variance held.
  double loo_variance_scale() const { return loo_variance_scale_; }
  const ThroughputFitStats& stats() const { return stats_; }

  // Per-value effects (log multipliers; 0 for values the fit did not see).
  double node_effect(int num_nodes) const;
  double placement_effect(int num_nodes, int num_replicas) const;
  double batch_effect(int local_bsz) const;
  double compute_effect(int num_nodes, int num_replicas) const;
  double sync_batch_effect(int local_bsz) const;
  const std::vector<int>& node_counts() const { return node_counts_; }
  const std::vector<std::pair<int, int>>& placements() const { return placements_; }
  const std::vector<int>& batch_sizes() const { return batch_sizes_; }
  const std::vector<std::pair<int, int>>& compute_placements() const { return compute_placements_; }

  // A copy for other hardware: the core parameters moved by `shift` (theta units: log of the
  // positive ones) with `extra_cov` (kNumThroughputParams^2, row-major) added to their
  // covariance. The effects are kept. Used to project a model onto an unmeasured instance type.
  ThroughputModel Projected(const std::vector<double>& shift,
                            const std::vector<double>& extra_cov) const;

  // Internal representation: theta = [core | node | batch | sync_batch effects | one block per
  // (num_nodes, num_replicas) of compute_placements(): its compute effect, then its placement
  // effect when num_nodes >= 2 and num_replicas >= 2]; core[i] = log(value) for positive
  // parameters, value for kappa, gamma, zeta_c, omega.
  const std::vector<double>& theta() const { return theta_; }
  // Posterior covariance of theta[i] and theta[j]. Kept in O(effects) memory: the core block, the
  // core x effect block, and the effect pairs that share a measured configuration (others: 0).
  double covariance(int i, int j) const;

 private:
  friend ThroughputModel FitThroughput(const std::vector<Measurement>&,
                                       const ThroughputFitOptions&);
  friend ThroughputModel FitThroughputWithPrior(const std::vector<Measurement>&,
                                                const ThroughputFitOptions&,
                                                const detail::TypePrior&);
  // FitThroughput's steps (throughput_fit.cpp).
  class Fitter;
  int NodeIndex(int num_nodes) const;  // index into theta_, -1 if unseen
  int PlaceIndex(int num_nodes, int num_replicas) const;
  int BatchIndex(int local_bsz) const;
  int ComputeIndex(int num_nodes, int num_replicas) const;
  int SyncBatchIndex(int local_bsz) const;
  int num_effects() const { return static_cast<int>(theta_.size()) - kNumThroughputParams; }
  std::vector<double> theta_;
  // Covariance of theta (see covariance()): cov_core_ kC x kC and cov_cross_ kC x E row-major;
  // cov_pairs_ sorted (a, b), a <= b, effect indices (theta index - kC).
  struct EffectPair {
    int a, b;
    double v;
  };
  std::vector<double> cov_core_, cov_cross_;
  std::vector<EffectPair> cov_pairs_;
  std::vector<bool> identified_;
  std::vector<int> node_counts_;                         // sorted node counts (>= 2) with an effect
  std::vector<std::pair<int, int>> placements_;          // sorted (N, R), N >= 2, with an effect
  std::vector<int> batch_sizes_;                         // sorted batch sizes with an effect
  std::vector<std::pair<int, int>> compute_placements_;  // sorted (N, R) with a compute effect
  std::vector<int> block_offset_;  // theta index of each compute placement's block
  double b_ref_ = 1;
  double noise_sigma_ = 0.05;
  // Std of an unseen value's effect, per kind: the fit's options, then updated by the spread of
  // the kind's fitted effects (one EM step, shrunk towards the option; throughput_fit.cpp).
  double node_effect_sigma_ = 0.2;
  double placement_effect_sigma_ = 0.1;
  double batch_effect_sigma_ = 0.1;
  double compute_effect_sigma_ = 0.05;
  double sync_batch_effect_sigma_ = 0.1;
  double growth_sigma_ = 0.29;
  double loo_variance_scale_ = 1.0;
  // The largest replica count the fit saw with R >= 2 on one machine (local = true) or over the
  // network; 0 if none.
  int MaxReplicasSeen(bool local) const;
  ThroughputFitStats stats_;
};

// Fits the model. Deterministic for the same input. Never throws on degenerate input (one
// configuration, one batch size, one replica, one node): unidentified parameters keep their priors
// and are flagged. Throws cloudtune::InputError only on empty input or invalid options.
// A configuration with several replicas and sync_time == 0 counts as "sync not measured" (e.g.
// converted Gavel traces): it constrains the step time only, not the compute time.
// Memory: O(configurations + effects): the Jacobian holds at most kC + 3 + 2 * 8 entries per
// configuration (residual blocks of <= 8 rows of one placement); the effects' information matrix
// holds the pairs that share a configuration, plus its sparse factor's fill-in.
// bench/bench_fit_memory measures the peak heap of a fit against its input.
ThroughputModel FitThroughput(const std::vector<Measurement>& data,
                              const ThroughputFitOptions& options = {});
// The same fit with the core's priors, starting point and b_ref given (throughput_types.cpp: one
// instance type's fit centred on another type's model).
ThroughputModel FitThroughputWithPrior(const std::vector<Measurement>& data,
                                       const ThroughputFitOptions& options,
                                       const detail::TypePrior& prior);

}  // namespace cloudtune::estimator
