// The efficiency model's JSON form (cloudtune.efficiency_model/1): what a recommendation record
// keeps under models.efficiency, and what `recommend --from` and `recommend --gns FILE` decide
// with.
#include <cmath>
#include <string>

#include "estimator/core/error.h"
#include "estimator/efficiency.h"

namespace cloudtune::estimator {

namespace {

constexpr const char* kSchema = "cloudtune.efficiency_model/1";

[[noreturn]] void Bad(const std::string& source, const std::string& what) {
  throw InputError(source + ": " + what);
}

}  // namespace

nlohmann::json EfficiencyModel::ToJson() const {
  nlohmann::json j;
  j["schema"] = kSchema;
  j["form"] = "r(P,B) = exp(rho0(P)) / (exp(-drift(P)) + (1 - exp(-drift(P))) * (B/B0)^-gamma)";
  j["base_batch"] = base_batch_;
  j["single_batch"] = single_batch_;
  j["gamma"] = gamma_;
  j["gamma_fitted"] = gamma_fitted_;
  j["progress_growth"] = delta_;
  j["max_observed_progress"] = max_progress_;
  j["max_observed_batch"] = max_batch_;
  j["observed_batches"] = batches_;
  j["fit"] = {{"observations", n_obs_}, {"skipped", n_skipped_}, {"residual_rms", residual_rms_}};
  j["uncertainty"] = {{"min_log_sigma", min_log_sigma_},
                      {"extrapolation_sigma", extrapolation_sigma_},
                      {"growth_sigma", growth_sigma_},
                      {"noise_log_sigma", noise_log_sigma_},
                      {"progress_growth_sigma", delta_sigma_}};
  nlohmann::json ks = nlohmann::json::array();
  for (const Knot& k : knots_)
    ks.push_back({{"progress", k.progress}, {"rho0", k.rho0}, {"drift", k.drift}});
  j["knots"] = ks;
  return j;
}

EfficiencyModel EfficiencyModel::FromJson(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) Bad(source, "efficiency model: not a JSON object");
  auto it = j.find("schema");
  if (it == j.end() || !it->is_string())
    Bad(source, "schema: missing (expected \"" + std::string(kSchema) + "\")");
  if (it->get<std::string>() != kSchema)
    Bad(source, "schema: '" + it->get<std::string>() + "' is not \"" + kSchema + "\"");
  auto num = [&](const nlohmann::json& o, const char* key, const std::string& where) {
    auto f = o.find(key);
    if (f == o.end() || !f->is_number()) Bad(source, where + key + ": missing or not a number");
    double v = f->get<double>();
    if (!std::isfinite(v)) Bad(source, where + key + ": not finite");
    return v;
  };
  EfficiencyModel m;
  m.base_batch_ = num(j, "base_batch", "");
  if (!(m.base_batch_ > 0)) Bad(source, "base_batch: must be positive");
  auto sb = j.find("single_batch");
  if (sb == j.end() || !sb->is_boolean()) Bad(source, "single_batch: missing or not a boolean");
  m.single_batch_ = sb->get<bool>();
  m.max_progress_ = num(j, "max_observed_progress", "");
  m.gamma_ = num(j, "gamma", "");
  if (!(m.gamma_ > 0)) Bad(source, "gamma: must be positive");
  if (auto g = j.find("gamma_fitted"); g != j.end() && g->is_boolean())
    m.gamma_fitted_ = g->get<bool>();
  m.max_batch_ = num(j, "max_observed_batch", "");
  if (j.contains("progress_growth")) {  // absent in a model written before it: flat
    m.delta_ = num(j, "progress_growth", "");
    if (!(m.delta_ >= 0 && m.delta_ <= 1)) Bad(source, "progress_growth: must be in [0, 1]");
  }
  if (auto ob = j.find("observed_batches"); ob != j.end() && ob->is_array())
    for (const auto& b : *ob)
      if (b.is_number()) m.batches_.push_back(b.get<double>());
  if (auto f = j.find("fit"); f != j.end() && f->is_object()) {
    m.n_obs_ = static_cast<int>(num(*f, "observations", "fit."));
    m.n_skipped_ = static_cast<int>(num(*f, "skipped", "fit."));
    m.residual_rms_ = num(*f, "residual_rms", "fit.");
  }
  if (auto u = j.find("uncertainty"); u != j.end() && u->is_object()) {
    m.min_log_sigma_ = num(*u, "min_log_sigma", "uncertainty.");
    m.extrapolation_sigma_ = num(*u, "extrapolation_sigma", "uncertainty.");
    if (u->contains("growth_sigma")) m.growth_sigma_ = num(*u, "growth_sigma", "uncertainty.");
    if (u->contains("noise_log_sigma"))
      m.noise_log_sigma_ = num(*u, "noise_log_sigma", "uncertainty.");
    if (u->contains("progress_growth_sigma")) {
      m.delta_sigma_ = num(*u, "progress_growth_sigma", "uncertainty.");
      if (!(m.delta_sigma_ >= 0)) Bad(source, "uncertainty.progress_growth_sigma: must be >= 0");
    }
  }
  auto ks = j.find("knots");
  if (ks == j.end() || !ks->is_array() || ks->empty())
    Bad(source, "knots: missing or not a non-empty array");
  for (size_t i = 0; i < ks->size(); ++i) {
    const auto& o = (*ks)[i];
    const std::string where = "knots[" + std::to_string(i) + "].";
    if (!o.is_object()) Bad(source, where.substr(0, where.size() - 1) + ": not an object");
    Knot k{num(o, "progress", where), num(o, "rho0", where), num(o, "drift", where)};
    if (k.drift < 0) Bad(source, where + "drift: must be >= 0");
    if (!m.knots_.empty() && k.progress <= m.knots_.back().progress)
      Bad(source, where + "progress: knots must be in increasing progress");
    m.knots_.push_back(k);
  }
  return m;
}

}  // namespace cloudtune::estimator
