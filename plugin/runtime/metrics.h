// Prometheus text exposition (format 0.0.4) of the online tuner's live numbers, rendered from a
// plain value struct so the HTTP endpoint never touches training state. Every gauge has # HELP and
// # TYPE lines; a field left at NaN (the default) is "not known yet" and is omitted.
#pragma once

#include <cmath>
#include <limits>
#include <string>

namespace cloudtune::runtime {

// What /metrics reports. Units are in the field comments (and in the metric names).
struct MetricsSnapshot {
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

  // Measured at the current configuration.
  double step = kUnknown;                    // optimizer steps taken (counter)
  double step_time_seconds = kUnknown;       // mean seconds per optimizer step
  double compute_seconds = kUnknown;         // of which compute (per worker)
  double sync_seconds = kUnknown;            // of which exposed gradient all-reduce
  double throughput = kUnknown;              // samples per second
  double statistical_efficiency = kUnknown;  // in (0, 1]
  double goodput = kUnknown;                 // throughput x statistical efficiency (samples/s)
  double noise_scale = kUnknown;             // gradient noise scale phi (samples)
  double grad_sqr = kUnknown;                // |G|^2 estimate
  double grad_var = kUnknown;                // tr(Sigma) estimate
  double progress = kUnknown;                // progress in base-batch steps
  double num_nodes = kUnknown;               // current configuration
  double num_replicas = kUnknown;
  double global_batch = kUnknown;            // samples per optimizer step
  double cost_rate_usd_per_hour = kUnknown;  // price of the current fleet

  // From the latest recommendation.
  double predicted_cost_rate_usd_per_hour = kUnknown;  // proposed fleet
  double predicted_throughput = kUnknown;              // proposed configuration (samples/s)
  double predicted_goodput = kUnknown;
  double predicted_gain = kUnknown;    // relative improvement of the objective (0.2 = 20% better)
  double straggler_factor = kUnknown;  // slowest worker's compute / median (1 = none)

  // Service counters.
  double refits_total = kUnknown;
  double fit_errors_total = kUnknown;
  double recommendations_total = kUnknown;  // recommendation changes published
  double preemption_notice = kUnknown;      // 1 once a revocation notice was seen, else 0
  double snapshots_total = kUnknown;        // hand-offs from the training thread
};

// Renders `m` as Prometheus text format 0.0.4 (Content-Type: text/plain; version=0.0.4).
// Metric names are prefixed with `prefix` (default "cloudtune_").
std::string RenderPrometheus(const MetricsSnapshot& m, const std::string& prefix = "cloudtune_");

// Content-Type header value for RenderPrometheus output.
inline const char* PrometheusContentType() { return "text/plain; version=0.0.4; charset=utf-8"; }

}  // namespace cloudtune::runtime
