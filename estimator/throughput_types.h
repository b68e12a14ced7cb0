// One throughput model over instance types: what is physical is shared, what is hardware is per
// type, and a type never measured is projected through the same model.
//
//   CrossTypeThroughputModel m = FitCrossType(measurements, hardware_by_type, options);
//   StepPrediction p = m.Predict(key);            // key.instance_type: a measured type
//   StepPrediction q = m.Predict(key, hardware);  // any type, measured or not
//
// How the types share: the type with the most configurations (the reference) is fitted alone, as
// FitThroughput does. Every other measured type is fitted to its own rows with the reference's
// posterior as its prior, moved by the hardware ratios:
//   - per-sample compute time (beta_c) by the ratio of the GPUs' training TFLOPS and memory
//     bandwidth (their geometric mean: training kernels are partly compute-, partly memory-bound);
//   - the all-reduce over the network (alpha_n, beta_n, delta_n together) by the ratio of the
//     machines' network bandwidth; when the job says how many bytes a step all-reduces
//     (CrossTypeFitOptions::gradient_bytes), by the ratio of the wire time at each machine's line
//     rate plus the per-byte host time the reference measured beyond its own wire time (see
//     gradient_bytes);
//   - the batch-independent compute time (alpha_c: launches, host, data loading) and the all-reduce
//     within one machine (alpha_l, beta_l: PCIe or NVLink, which the catalog does not say) stay at
//     the reference's value with a wide prior;
//   - what describes the job rather than the hardware stays at the reference's value with the
//     single-type fit's own prior width: the batch exponent kappa, the overlap (gamma, omega), the
//     per-GPU contention zeta_c, and the ratios of the all-reduce terms (the bytes a step reduces
//     are the job's: latency and bandwidth terms move together).
// A type with one configuration thus predicts its others through the reference's shape; a type
// with many is fitted by its own data. The prior widths add to the reference's posterior variance,
// so that the predicted log_sigma grows with how little the type was measured and how far its
// hardware is from the reference's. An unmeasured type is the reference's model moved by the same
// ratios with the same widths (ThroughputModel::Projected).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "estimator/core/trace.h"
#include "estimator/throughput.h"

namespace cloudtune::estimator {

// What the catalog knows about an instance type's hardware. 0 = unknown.
struct Hardware {
  // Dense FP32 TFLOPS of one GPU: the figure the specs give alike for every GPU (tensor-core
  // figures are quoted at different precisions and sparsities), so that ratios compare like with
  // like.
  double gpu_tflops = 0;
  double memory_bandwidth_gbs = 0;  // of one GPU, GB/s
  double network_gbps = 0;          // of one machine, Gbit/s
  bool known() const { return gpu_tflops > 0 || memory_bandwidth_gbs > 0 || network_gbps > 0; }
};

struct CrossTypeFitOptions {
  // Options of every per-type fit (see ThroughputFitOptions).
  ThroughputFitOptions fit;
  // Log standard deviation of a type's per-sample compute time relative to the reference's when
  // projected from both GPUs' TFLOPS and memory bandwidth: the two ratios bound the truth (a
  // kernel is limited by one or the other), and they differ by up to ~1.6x between GPU
  // generations, so +-0.3 in log covers the span. Must be > 0.
  double spec_compute_sigma = 0.3;
  // The same when only one of the two figures is known for both GPUs. Must be > 0.
  double partial_spec_compute_sigma = 0.45;
  // Log standard deviation of the network all-reduce time relative to the reference's when
  // projected from the machines' Gbit/s: latency, NIC offload and topology are not in the
  // ratio. With gradient_bytes, the host time the reference measured beyond its wire time adds
  // unknown_sigma times its share of the projected time (see gradient_bytes). Must be > 0.
  double network_sigma = 0.5;
  // Log standard deviation of the batch-independent compute time between types: host CPUs,
  // kernel-launch latency and data loading differ between machines and are not in the catalog.
  // Must be > 0.
  double host_sigma = 0.5;
  // Log standard deviation of a hardware ratio nothing known informs: per-sample compute without
  // GPU specs, the network without Gbit/s, the all-reduce within one machine (PCIe or NVLink: up to
  // ~10x apart). 1.0 = a factor e at one sigma. Must be > 0.
  double unknown_sigma = 1.0;
  // Log standard deviation between types of the ratios beta_n/alpha_n, delta_n/alpha_n and
  // beta_l/alpha_l (latency vs bandwidth terms of the same bytes). Must be > 0.
  double ratio_sigma = 0.3;
  // Bytes one optimizer step all-reduces: a property of the job (its gradients: the elements of
  // the parameters that require a gradient times their element size, 4 in FP32), not a setting.
  // 0 = unknown. When known, the network all-reduce of 2 machines moves from the reference's
  // fitted time t (alpha_n) to another type's as the sum of a wire time and a host time: a
  // 2-machine ring sends the gradient bytes G once over each machine's link, so the wire takes w =
  // 8 G / line rate; what the reference took beyond its wire time, h = max(0, t - w_ref), is
  // per-byte work that the link does not explain (the host stack, the few flows a collective
  // opens, a per-flow rate cap) and is carried to the other type unchanged:
  // t_to = t (w_to + h) / (w_ref + h). With h = 0 (a reference at its line rate) this is the
  // ratio of line rates, as without the bytes. Nothing in the catalog says that the other
  // machines' host time is the same, so the projection's log standard deviation is
  // hypot(network_sigma, unknown_sigma * h / (w_to + h)). Must be >= 0.
  double gradient_bytes = 0;

  bool IsValid(std::string* error) const;
};

class CrossTypeThroughputModel {
 public:
  // The prediction for key.instance_type (a measured type; "" = the reference type). Throws
  // cloudtune::InputError for a type that was not measured and whose hardware was not given to
  // FitCrossType; use the overload with the type's Hardware for those.
  StepPrediction Predict(const ConfigKey& key, int gpus_per_node = 0) const;
  // The same, projecting the reference's model with `hardware` when key.instance_type was not
  // measured. Throws cloudtune::InputError naming the type when it was not measured and `hardware`
  // is unknown (no catalog entry).
  StepPrediction Predict(const ConfigKey& key, const Hardware& hardware,
                         int gpus_per_node = 0) const;
  // The model of one type: its fit if measured, else the projection (throws as Predict does).
  ThroughputModel ModelFor(const std::string& type, const Hardware& hardware) const;

  bool Measured(const std::string& type) const { return models_.count(type) > 0; }
  const std::string& reference() const { return reference_; }
  // Measured types, sorted.
  std::vector<std::string> types() const;
  // The fitted model of a measured type (throws std::out_of_range otherwise).
  const ThroughputModel& model(const std::string& type) const { return models_.at(type); }
  // The hardware given for a type (unknown when none was).
  Hardware hardware(const std::string& type) const;

  // {"schema": "cloudtune.throughput_types/1", "reference": T, "types": {T: {"hardware": …,
  //  "configurations": n, "prior": {…} (non-reference types), "model": <ThroughputModel JSON>}}}.
  // Each type's model says which of its parameters the data identified.
  nlohmann::json ToJson() const;
  // Reads ToJson's form, or a single-type model JSON (one type named ""). Throws
  // cloudtune::InputError naming `source` and the field.
  static CrossTypeThroughputModel FromJson(const nlohmann::json& j, const std::string& source);

 private:
  friend CrossTypeThroughputModel FitCrossType(const std::vector<Measurement>&,
                                               const std::map<std::string, Hardware>&,
                                               const CrossTypeFitOptions&);
  std::string reference_;
  std::map<std::string, ThroughputModel> models_;  // by type
  std::map<std::string, Hardware> hardware_;       // as given, by type
  std::map<std::string, nlohmann::json> priors_;   // per non-reference type: what it started from
  CrossTypeFitOptions options_;
};

// Fits one model per measured instance type (key.instance_type; "" is a type too), sharing through
// the reference type as described above. `hardware` may name more types than the data (they are
// kept for projection) or fewer (their ratios are then unknown). Deterministic. Throws
// cloudtune::InputError on empty input or invalid options.
CrossTypeThroughputModel FitCrossType(const std::vector<Measurement>& data,
                                      const std::map<std::string, Hardware>& hardware = {},
                                      const CrossTypeFitOptions& options = {});

}  // namespace cloudtune::estimator
