// Throughput (parallel efficiency) model: predicts compute, all-reduce and step time of a
// configuration, fitted to measured configurations with Ceres.
//
// CONTRACT used by search/ and plugin/ (keep these signatures; add freely):
//   ThroughputFitOptions opts;  std::string err;  opts.IsValid(&err);
//   ThroughputModel m = FitThroughput(measurements, opts);
//   StepPrediction p = m.Predict(key, gpus_per_node);
//   nlohmann::json j = m.ToJson();  ThroughputModel m2 = ThroughputModel::FromJson(j, "name");
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "estimator/trace.h"

namespace cloudtune::estimator {

// A prediction for one configuration. Times in seconds.
struct StepPrediction {
  double compute_time = 0;  // per micro-step compute time on one worker
  double sync_time = 0;     // all-reduce time not hidden by overlap
  double step_time = 0;     // seconds per optimizer step (accumulation included)
  double throughput = 0;    // samples per second = global_batch / step_time
  // One standard deviation of log(step_time): a relative uncertainty (0.05 = ~5%). Grows when the
  // configuration lies outside what the fit saw (extrapolation) or the parameter was unidentified.
  double log_sigma = 0;
};

struct ThroughputFitOptions {
  // ... documented fields with in-class defaults (owned by the throughput implementation)
  bool IsValid(std::string* error) const;
};

class ThroughputModel {
 public:
  // gpus_per_node: GPUs per machine of the configuration (0 = unknown: assume the replicas are
  // spread evenly over num_nodes).
  StepPrediction Predict(const ConfigKey& key, int gpus_per_node = 0) const;
  nlohmann::json ToJson() const;
  // Throws cloudtune::InputError naming `source` and the field on a malformed or foreign model.
  static ThroughputModel FromJson(const nlohmann::json& j, const std::string& source);
  // (parameters, identified flags, fit statistics: owned by the throughput implementation)
};

// Fits the model. Deterministic for the same input. Never throws on degenerate input (one
// configuration, one batch size, one replica, one node): unidentified parameters keep their priors
// and are flagged. Throws cloudtune::InputError only on empty input or invalid options.
ThroughputModel FitThroughput(const std::vector<Measurement>& data,
                              const ThroughputFitOptions& options = {});

}  // namespace cloudtune::estimator
