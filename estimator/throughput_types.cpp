// FitCrossType and CrossTypeThroughputModel: one throughput model over instance types.
#include "estimator/throughput_types.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "estimator/core/error.h"
#include "estimator/detail/throughput_form.h"
#include "estimator/detail/type_prior.h"

namespace cloudtune::estimator {
namespace {

constexpr int kC = kNumThroughputParams;
constexpr const char* kSchema = "cloudtune.throughput_types/1";
// Widths of the job's shape parameters between types: the single-type fit's own prior widths (see
// StartCore in throughput_fit.cpp), now centred on the reference's value.
constexpr double kKappaSigma = 0.3, kGammaSigma = 1.5, kZetaSigma = 0.05, kOmegaSigma = 0.2;

// How a type's core parameters move from the reference's (theta units) and how uncertain that is.
struct Shift {
  double compute = 0, compute_sigma = 1;  // beta_c
  double network = 0, network_sigma = 1;  // alpha_n, beta_n, delta_n together
  double host_sigma = 0.5;                // alpha_c
  double local_sigma = 1;                 // alpha_l, beta_l together
  nlohmann::json ToJson() const {
    return {{"log_compute_ratio", compute}, {"log_compute_sigma", compute_sigma},
            {"log_network_ratio", network}, {"log_network_sigma", network_sigma},
            {"log_host_sigma", host_sigma}, {"log_local_sigma", local_sigma}};
  }
};

// `ref_alpha_n`: the reference's fitted network all-reduce time of 2 machines (s).
Shift HardwareShift(const Hardware& ref, const Hardware& to, const CrossTypeFitOptions& o,
                    double ref_alpha_n) {
  Shift s;
  double sum = 0;
  int known = 0;
  if (ref.gpu_tflops > 0 && to.gpu_tflops > 0)
    sum += std::log(ref.gpu_tflops / to.gpu_tflops), ++known;
  if (ref.memory_bandwidth_gbs > 0 && to.memory_bandwidth_gbs > 0)
    sum += std::log(ref.memory_bandwidth_gbs / to.memory_bandwidth_gbs), ++known;
  s.compute = known ? sum / known : 0;
  s.compute_sigma = known == 2   ? o.spec_compute_sigma
                    : known == 1 ? o.partial_spec_compute_sigma
                                 : o.unknown_sigma;
  if (ref.network_gbps > 0 && to.network_gbps > 0) {
    const double wire_ref = 8 * o.gradient_bytes / (ref.network_gbps * 1e9);
    const double wire_to = 8 * o.gradient_bytes / (to.network_gbps * 1e9);
    const double host = std::isfinite(ref_alpha_n) ? std::max(0.0, ref_alpha_n - wire_ref) : 0;
    s.network = o.gradient_bytes > 0 ? std::log((wire_to + host) / (wire_ref + host))
                                     : std::log(ref.network_gbps / to.network_gbps);
    // The host part is carried unchanged although nothing known says that the other machine's
    // is the same: its share of the projected time adds unknown_sigma to what the line rates miss.
    const double host_share = o.gradient_bytes > 0 ? host / (wire_to + host) : 0;
    s.network_sigma = std::hypot(o.network_sigma, host_share * o.unknown_sigma);
  } else {
    s.network_sigma = o.unknown_sigma;
  }
  s.host_sigma = o.host_sigma;
  s.local_sigma = o.unknown_sigma;
  return s;
}

double RefAlphaN(const ThroughputModel& ref) { return std::exp(ref.theta()[kAlphaN]); }

// The reference's fitted core moved by `s`: prior terms of another type's fit.
detail::TypePrior MakePrior(const ThroughputModel& ref, const Shift& s,
                            const CrossTypeFitOptions& o) {
  const std::vector<double>& th = ref.theta();
  auto sd = [&](int i, double sigma) { return std::sqrt(sigma * sigma + ref.covariance(i, i)); };
  detail::TypePrior p;
  p.b_ref = ref.b_ref();
  for (int i = 0; i < kC; ++i) p.start[i] = th[i];
  p.start[kBetaC] += s.compute;
  p.start[kAlphaN] += s.network;
  p.start[kBetaN] += s.network;
  p.start[kDeltaN] += s.network;
  auto rel = [&](int a, int b) {
    return detail::TypePrior::Term{a, b, th[a] - th[b], o.ratio_sigma};
  };
  p.terms = {
      {kAlphaC, -1, th[kAlphaC], sd(kAlphaC, s.host_sigma)},
      {kBetaC, -1, th[kBetaC] + s.compute, sd(kBetaC, s.compute_sigma)},
      {kKappa, -1, th[kKappa], sd(kKappa, kKappaSigma)},
      {kAlphaN, -1, th[kAlphaN] + s.network, sd(kAlphaN, s.network_sigma)},
      rel(kBetaN, kAlphaN),
      rel(kDeltaN, kAlphaN),
      {kAlphaL, -1, th[kAlphaL], sd(kAlphaL, s.local_sigma)},
      rel(kBetaL, kAlphaL),
      {kGamma, -1, th[kGamma], sd(kGamma, kGammaSigma)},
      {kZetaC, -1, th[kZetaC], sd(kZetaC, kZetaSigma)},
      {kOmega, -1, th[kOmega], sd(kOmega, kOmegaSigma)},
  };
  return p;
}

// The covariance the same prior adds to a projected model (row-major kC x kC): each group of
// parameters that moves together shares its ratio's variance; the ratios within a group add theirs.
std::vector<double> ShiftCovariance(const Shift& s, const CrossTypeFitOptions& o) {
  std::vector<double> c(kC * kC, 0.0);
  auto group = [&](std::initializer_list<int> ids, double sigma) {
    for (int i : ids)
      for (int j : ids) c[i * kC + j] += sigma * sigma;
  };
  group({kAlphaC}, s.host_sigma);
  group({kBetaC}, s.compute_sigma);
  group({kKappa}, kKappaSigma);
  group({kAlphaN, kBetaN, kDeltaN}, s.network_sigma);
  group({kBetaN}, o.ratio_sigma);
  group({kDeltaN}, o.ratio_sigma);
  group({kAlphaL, kBetaL}, s.local_sigma);
  group({kBetaL}, o.ratio_sigma);
  group({kGamma}, kGammaSigma);
  group({kZetaC}, kZetaSigma);
  group({kOmega}, kOmegaSigma);
  return c;
}

std::vector<double> ShiftVector(const Shift& s) {
  std::vector<double> v(kC, 0.0);
  v[kBetaC] = s.compute;
  v[kAlphaN] = v[kBetaN] = v[kDeltaN] = s.network;
  return v;
}

nlohmann::json HardwareJson(const Hardware& h) {
  return {{"gpu_tflops", h.gpu_tflops},
          {"memory_bandwidth_gbs", h.memory_bandwidth_gbs},
          {"network_gbps", h.network_gbps}};
}

}  // namespace

bool CrossTypeFitOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!fit.IsValid(error)) return false;
  const std::pair<const char*, double> sigmas[] = {
      {"spec_compute_sigma", spec_compute_sigma},
      {"partial_spec_compute_sigma", partial_spec_compute_sigma},
      {"network_sigma", network_sigma},
      {"host_sigma", host_sigma},
      {"unknown_sigma", unknown_sigma},
      {"ratio_sigma", ratio_sigma}};
  for (const auto& [name, v] : sigmas)
    if (!(v > 0) || !std::isfinite(v)) return fail(std::string(name) + " must be > 0");
  if (!(gradient_bytes >= 0) || !std::isfinite(gradient_bytes))
    return fail("gradient_bytes must be >= 0");
  return true;
}

CrossTypeThroughputModel FitCrossType(const std::vector<Measurement>& data,
                                      const std::map<std::string, Hardware>& hardware,
                                      const CrossTypeFitOptions& options) {
  std::string err;
  if (!options.IsValid(&err)) throw InputError("throughput fit options: " + err);
  if (data.empty()) throw InputError("throughput fit: no measurements");
  std::map<std::string, std::vector<Measurement>> by_type;
  for (const auto& m : data) by_type[m.key.instance_type].push_back(m);
  CrossTypeThroughputModel out;
  out.options_ = options;
  out.hardware_ = hardware;
  size_t most = 0;
  for (const auto& [type, ms] : by_type)
    if (ms.size() > most) most = ms.size(), out.reference_ = type;
  const ThroughputModel& ref =
      out.models_.emplace(out.reference_, FitThroughput(by_type[out.reference_], options.fit))
          .first->second;
  const Hardware ref_hw = out.hardware(out.reference_);
  for (const auto& [type, ms] : by_type) {
    if (type == out.reference_) continue;
    const Shift s = HardwareShift(ref_hw, out.hardware(type), options, RefAlphaN(ref));
    out.models_.emplace(type, FitThroughputWithPrior(ms, options.fit, MakePrior(ref, s, options)));
    out.priors_[type] = s.ToJson();
  }
  return out;
}

Hardware CrossTypeThroughputModel::hardware(const std::string& type) const {
  auto it = hardware_.find(type);
  return it == hardware_.end() ? Hardware{} : it->second;
}

std::vector<std::string> CrossTypeThroughputModel::types() const {
  std::vector<std::string> v;
  for (const auto& [t, m] : models_) v.push_back(t);
  return v;
}

ThroughputModel CrossTypeThroughputModel::ModelFor(const std::string& type,
                                                   const Hardware& hw) const {
  auto it = models_.find(type);
  if (it != models_.end()) return it->second;
  if (!hw.known())
    throw InputError("instance type '" + type +
                     "' was not measured and has no catalog entry (GPU TFLOPS, memory bandwidth "
                     "or network bandwidth): its throughput cannot be projected");
  const Shift s =
      HardwareShift(hardware(reference_), hw, options_, RefAlphaN(models_.at(reference_)));
  return models_.at(reference_).Projected(ShiftVector(s), ShiftCovariance(s, options_));
}

StepPrediction CrossTypeThroughputModel::Predict(const ConfigKey& key, const Hardware& hw,
                                                 int gpus_per_node) const {
  auto it = models_.find(key.instance_type);
  if (it != models_.end()) return it->second.Predict(key, gpus_per_node);
  if (key.instance_type.empty() && models_.size() == 1)
    return models_.begin()->second.Predict(key, gpus_per_node);
  return ModelFor(key.instance_type, hw).Predict(key, gpus_per_node);
}

StepPrediction CrossTypeThroughputModel::Predict(const ConfigKey& key, int gpus_per_node) const {
  return Predict(key, hardware(key.instance_type), gpus_per_node);
}

nlohmann::json CrossTypeThroughputModel::ToJson() const {
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [t, m] : models_) {
    nlohmann::json e = {{"hardware", HardwareJson(hardware(t))},
                        {"configurations", m.stats().configurations},
                        {"model", m.ToJson()}};
    auto p = priors_.find(t);
    if (p != priors_.end()) e["prior"] = p->second;
    types[t] = std::move(e);
  }
  nlohmann::json unmeasured = nlohmann::json::object();
  for (const auto& [t, h] : hardware_)
    if (!models_.count(t)) unmeasured[t] = HardwareJson(h);
  const CrossTypeFitOptions& o = options_;
  return {{"schema", kSchema},
          {"reference", reference_},
          {"types", std::move(types)},
          {"unmeasured_hardware", std::move(unmeasured)},
          {"projection",
           {{"spec_compute_sigma", o.spec_compute_sigma},
            {"partial_spec_compute_sigma", o.partial_spec_compute_sigma},
            {"network_sigma", o.network_sigma},
            {"host_sigma", o.host_sigma},
            {"unknown_sigma", o.unknown_sigma},
            {"ratio_sigma", o.ratio_sigma},
            {"gradient_bytes", o.gradient_bytes}}}};
}

namespace {

double NumberOr(const nlohmann::json& o, const char* key, const std::string& where,
                const std::string& source, double fallback) {
  if (!o.contains(key)) return fallback;
  const auto& v = o[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    throw InputError(source + ": " + where + "." + key + ": expected a number >= 0");
  return v.get<double>();
}

Hardware ReadHardware(const nlohmann::json& o, const std::string& where,
                      const std::string& source) {
  if (!o.is_object()) throw InputError(source + ": " + where + ": expected an object");
  Hardware h;
  h.gpu_tflops = NumberOr(o, "gpu_tflops", where, source, 0);
  h.memory_bandwidth_gbs = NumberOr(o, "memory_bandwidth_gbs", where, source, 0);
  h.network_gbps = NumberOr(o, "network_gbps", where, source, 0);
  return h;
}

}  // namespace

CrossTypeThroughputModel CrossTypeThroughputModel::FromJson(const nlohmann::json& j,
                                                            const std::string& source) {
  CrossTypeThroughputModel m;
  if (!j.is_object()) throw InputError(source + ": not a JSON object");
  if (!j.contains("types")) {  // a single-type model
    m.models_.emplace("", ThroughputModel::FromJson(j, source));
    return m;
  }
  if (!j.contains("schema") || j["schema"] != kSchema)
    throw InputError(source + ": schema: expected \"" + kSchema + "\"");
  if (!j.contains("reference") || !j["reference"].is_string())
    throw InputError(source + ": reference: expected a string");
  m.reference_ = j["reference"].get<std::string>();
  const auto& types = j["types"];
  if (!types.is_object() || types.empty())
    throw InputError(source + ": types: expected a non-empty object");
  for (auto it = types.begin(); it != types.end(); ++it) {
    const std::string where = "types." + it.key();
    const auto& e = it.value();
    if (!e.is_object() || !e.contains("model"))
      throw InputError(source + ": " + where + ": expected an object with a \"model\"");
    m.models_.emplace(it.key(), ThroughputModel::FromJson(e["model"], source + ": " + where));
    if (e.contains("hardware"))
      m.hardware_[it.key()] = ReadHardware(e["hardware"], where + ".hardware", source);
    if (e.contains("prior")) m.priors_[it.key()] = e["prior"];
  }
  if (!m.models_.count(m.reference_))
    throw InputError(source + ": reference: '" + m.reference_ + "' is not one of types");
  if (j.contains("unmeasured_hardware") && j["unmeasured_hardware"].is_object())
    for (auto it = j["unmeasured_hardware"].begin(); it != j["unmeasured_hardware"].end(); ++it)
      m.hardware_[it.key()] = ReadHardware(it.value(), "unmeasured_hardware." + it.key(), source);
  if (j.contains("projection")) {
    const auto& p = j["projection"];
    CrossTypeFitOptions& o = m.options_;
    o.spec_compute_sigma =
        NumberOr(p, "spec_compute_sigma", "projection", source, o.spec_compute_sigma);
    o.partial_spec_compute_sigma = NumberOr(p, "partial_spec_compute_sigma", "projection", source,
                                            o.partial_spec_compute_sigma);
    o.network_sigma = NumberOr(p, "network_sigma", "projection", source, o.network_sigma);
    o.host_sigma = NumberOr(p, "host_sigma", "projection", source, o.host_sigma);
    o.unknown_sigma = NumberOr(p, "unknown_sigma", "projection", source, o.unknown_sigma);
    o.ratio_sigma = NumberOr(p, "ratio_sigma", "projection", source, o.ratio_sigma);
    o.gradient_bytes = NumberOr(p, "gradient_bytes", "projection", source, o.gradient_bytes);
    std::string err;
    if (!o.IsValid(&err)) throw InputError(source + ": projection: " + err);
  }
  return m;
}

}  // namespace cloudtune::estimator
