// The value types that flow through cloudtune, each defined once: a configuration's key, its
// measurement, the gradient-noise state, the objective's goal, and the snapshot of what a job has
// measured that the hooks hand to the runtime (and the CLI and the replay build from files).
// Plain C++; estimator/, search/, the runtime, the hooks and the CLI all use these.
#pragma once

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace cloudtune::core {

// What identifies a configuration.
struct ConfigKey {
  int num_nodes = 1;          // machines
  int num_replicas = 1;       // data-parallel workers (GPUs) over all machines
  int local_bsz = 1;          // samples per worker per micro-step
  int accum_steps = 0;        // extra accumulation micro-steps per optimizer step (0 = none)
  std::string instance_type;  // "" when the trace does not say

  // Samples per optimizer step: num_replicas * local_bsz * (accum_steps + 1).
  long long global_batch() const {
    return static_cast<long long>(num_replicas) * local_bsz * (accum_steps + 1);
  }
  // GPUs per machine: replicas spread over the machines, rounded up (a placement of 11 replicas
  // on 4 machines needs machines of 3 GPUs). At least 1.
  int gpus_per_node() const {
    const int n = num_nodes > 0 ? num_nodes : 1;
    const int g = (num_replicas + n - 1) / n;
    return g > 0 ? g : 1;
  }
  auto tie() const {
    return std::tie(instance_type, num_nodes, num_replicas, local_bsz, accum_steps);
  }
  bool operator<(const ConfigKey& o) const { return tie() < o.tie(); }
  bool operator==(const ConfigKey& o) const { return tie() == o.tie(); }
};

// One configuration's averaged measurements.
struct Measurement {
  ConfigKey key;
  double step_time = 0;       // seconds per optimizer step (mean over rows)
  double sync_time = 0;       // seconds of it spent in the gradient all-reduce (mean over rows)
  int rows = 0;               // rows averaged
  int max_gpus_per_node = 0;  // largest per-node GPU count seen in a placement (0 = unknown)
  double compute_time() const { return step_time - sync_time; }
  // Samples per second at this configuration.
  double throughput() const { return static_cast<double>(key.global_batch()) / step_time; }
};

// Smoothed gradient statistics at the batch the job ran. Progress is counted in optimizer steps
// at base_batch (B0).
struct NoiseState {
  double grad_sqr = 0;    // |G|^2, squared norm of the true gradient
  double grad_var = 0;    // tr(Sigma), gradient variance normalised to base_batch
  double base_batch = 1;  // B0, samples per optimizer step that grad_var refers to
  bool biased = false;    // estimated from consecutive steps of one replica
  // Standard error of log(noise scale) from the estimator's own sampling noise (0 = unknown or
  // exact). The efficiency model adds it to its predictions' uncertainty.
  double log_sigma = 0;
  // Noise scale phi = B0 * tr(Sigma) / |G|^2 (samples). Infinity when grad_sqr == 0.
  double noise_scale() const {
    if (grad_sqr <= 0) return std::numeric_limits<double>::infinity();
    return base_batch * grad_var / grad_sqr;
  }
  // Usable by the models: a positive |G|^2 and B0 and a finite tr(Sigma).
  bool usable() const { return grad_sqr > 0 && base_batch > 0 && std::isfinite(grad_var); }
};

// The gradient statistics measured at one point of a run (a validation-trace row, or one
// measurement interval of a live job).
struct NoiseObservation {
  double batch = 0;      // total samples per optimizer step of the run (> 0)
  double progress = 0;   // progress (B0-steps) at which the statistics were measured (>= 0)
  double iteration = 0;  // optimizer steps the run had made (informational, >= 0)
  double grad_sqr = 0;   // |G|^2 estimate
  double grad_var = 0;   // tr(Sigma) estimate, normalised to the base batch B0
};

// The spot revocations an instance type has dealt the job, against the time it was exposed to them.
struct SpotExposure {
  double node_hours = 0;  // spot node-hours the job ran on this type (>= 0)
  int revocations = 0;    // revocations it saw there (notices, capacity taken back; >= 0)
};

// What the user optimises.
enum class Goal { kCost, kTime };
const char* GoalName(Goal g);  // "cost", "time"
// Parses "cost" or "time"; false (and `goal` untouched) otherwise.
bool ParseGoal(const std::string& name, Goal* goal);

// How the nodes of a configuration are bought.
enum class Purchase {
  kOnDemand,  // all nodes on-demand: never revoked
  kSpot,      // all nodes spot
  kAnchor,    // DeepVM: one on-demand anchor (holds checkpoints) + spot workers
};
const char* PurchaseName(Purchase p);  // "on-demand", "spot", "anchor"
// Parses a PurchaseName; returns false on an unknown name.
bool ParsePurchase(const std::string& s, Purchase* out);

// One part of a mixed cluster (search/mixed.h): nodes of one instance type, bought one way.
struct ClusterPart {
  std::string instance_type;
  int nodes = 1;
  int gpus_per_node = 1;
  Purchase purchase = Purchase::kOnDemand;
  int local_bsz = 0;  // samples per GPU per optimizer step
};

// What a job has measured, handed over as one immutable value: by the plugin to the runtime every
// measurement interval (training thread, O(configurations)), and built by the CLI and the replay
// from files. The runtime fills in what only it knows (progress, noise history, restored rows).
struct Snapshot {
  long long step = 0;          // optimizer steps taken (restored steps included)
  double elapsed_seconds = 0;  // since the job (or its first start) began
  double progress = 0;         // progress in base-batch steps (B0-steps); set by the runtime
  ConfigKey current;           // the configuration running now
  // How the current nodes are bought, when the job knows it (else the runtime's setting).
  std::optional<Purchase> purchase;
  int gpus_per_node = 0;  // of the current configuration (0 = current.gpus_per_node())
  // The job runs a mixed cluster (search/mixed.h) in place of `current`, which it still reports:
  // staying on `current` launches it again. Set by the plugin while the replicas' local batches
  // differ (Plugin::ReplicaBatches), and by the replay while it runs one.
  bool mixed_cluster = false;
  // Its parts, when known (the replay's; the live runtime's from the mixed cluster it proposed).
  std::vector<ClusterPart> mixed_parts;
  std::vector<Measurement> profile;  // every configuration measured so far (trace CSV values)
  // Bytes one optimizer step all-reduces: the gradients of the parameters that require one, times
  // their element size (set by the plugin from the model it sees; 0 = unknown).
  double gradient_bytes = 0;
  NoiseState noise;          // smoothed gradient statistics
  bool noise_valid = false;  // false until a gradient-noise step has been folded in
  // Gradient statistics over the run (one per measurement interval); with observations at two or
  // more batch sizes the efficiency drift model is fitted from them.
  std::vector<NoiseObservation> noise_history;
  long long skipped_steps = 0;    // steps with non-finite gradients (never folded in)
  double samples_per_second = 0;  // over the last interval
  double straggler_factor = 1;    // slowdown from stragglers (>= 1)
  // Spot nodes of each instance type the job knows it can get now (from a refused request or a
  // revocation notice); a type not listed: unknown, no limit.
  std::map<std::string, int> spot_nodes_available;
  // Spot exposure and revocations per instance type over the run: the search prices spot with the
  // revocation rate learned from them (search::LearnRevocationRates).
  std::map<std::string, SpotExposure> spot_exposure;
  // Spent so far (the replay knows it; a live job prices its elapsed time when it knows its price).
  double cost_usd = 0;             // USD spent
  double exploration_usd = 0;      // of which on exploratory measurements and switches into them
  double exploration_seconds = 0;  // seconds of elapsed_seconds spent on them
  // GPUs per machine of the current configuration.
  int current_gpus_per_node() const {
    return gpus_per_node > 0 ? gpus_per_node : current.gpus_per_node();
  }
};

}  // namespace cloudtune::core
