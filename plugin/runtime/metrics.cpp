#include "plugin/runtime/metrics.h"

#include <cstdio>

namespace cloudtune::runtime {
namespace {

void AppendValue(std::string* out, double v) {
  if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  *out += buf;
}

void Gauge(std::string* out, const std::string& prefix, const char* name, const char* type,
           const char* help, double v) {
  if (std::isnan(v)) return;
  const std::string full = prefix + name;
  *out += "# HELP " + full + " " + help + "\n";
  *out += "# TYPE " + full + " " + type + "\n";
  *out += full + " ";
  AppendValue(out, v);
  *out += "\n";
}

}  // namespace

std::string RenderPrometheus(const MetricsSnapshot& m, const std::string& prefix) {
  std::string o;
  o.reserve(4096);
  const std::string& p = prefix;
  Gauge(&o, p, "steps_total", "counter", "Optimizer steps taken by the job.", m.step);
  Gauge(&o, p, "step_time_seconds", "gauge", "Mean seconds per optimizer step.",
        m.step_time_seconds);
  Gauge(&o, p, "compute_time_seconds", "gauge", "Mean compute seconds per step on one worker.",
        m.compute_seconds);
  Gauge(&o, p, "sync_time_seconds", "gauge", "Mean exposed all-reduce seconds per step.",
        m.sync_seconds);
  Gauge(&o, p, "throughput_samples_per_second", "gauge", "Training samples per second.",
        m.throughput);
  Gauge(&o, p, "statistical_efficiency", "gauge",
        "Statistical efficiency of the current batch size (progress per sample vs base batch).",
        m.statistical_efficiency);
  Gauge(&o, p, "goodput_samples_per_second", "gauge", "Throughput times statistical efficiency.",
        m.goodput);
  Gauge(&o, p, "gradient_noise_scale_samples", "gauge", "Gradient noise scale (samples).",
        m.noise_scale);
  Gauge(&o, p, "gradient_sqr_norm", "gauge", "Estimated squared norm of the true gradient.",
        m.grad_sqr);
  Gauge(&o, p, "gradient_variance", "gauge", "Estimated gradient variance tr(Sigma).", m.grad_var);
  Gauge(&o, p, "progress_base_steps", "gauge", "Training progress in steps at the base batch.",
        m.progress);
  Gauge(&o, p, "num_nodes", "gauge", "Machines in the current configuration.", m.num_nodes);
  Gauge(&o, p, "num_replicas", "gauge", "Data-parallel workers in the current configuration.",
        m.num_replicas);
  Gauge(&o, p, "global_batch_samples", "gauge", "Samples per optimizer step.", m.global_batch);
  Gauge(&o, p, "cost_rate_usd_per_hour", "gauge", "Price of the current fleet (USD per hour).",
        m.cost_rate_usd_per_hour);
  Gauge(&o, p, "predicted_cost_rate_usd_per_hour", "gauge",
        "Price of the recommended fleet (USD per hour).", m.predicted_cost_rate_usd_per_hour);
  Gauge(&o, p, "predicted_throughput_samples_per_second", "gauge",
        "Predicted throughput of the recommended configuration.", m.predicted_throughput);
  Gauge(&o, p, "predicted_goodput_samples_per_second", "gauge",
        "Predicted goodput of the recommended configuration.", m.predicted_goodput);
  Gauge(&o, p, "predicted_gain_ratio", "gauge",
        "Predicted relative improvement of the objective by the recommendation.", m.predicted_gain);
  Gauge(&o, p, "straggler_factor", "gauge",
        "Slowest worker's compute time over the median (1 = no straggler).", m.straggler_factor);
  Gauge(&o, p, "refits_total", "counter", "Model refits run by the background tuner.",
        m.refits_total);
  Gauge(&o, p, "fit_errors_total", "counter", "Refits that failed.", m.fit_errors_total);
  Gauge(&o, p, "recommendations_total", "counter", "Changed recommendations published.",
        m.recommendations_total);
  Gauge(&o, p, "preemption_notice", "gauge", "1 once a spot revocation notice was seen.",
        m.preemption_notice);
  Gauge(&o, p, "snapshots_total", "counter", "Profile hand-offs from the training thread.",
        m.snapshots_total);
  return o;
}

}  // namespace cloudtune::runtime
