// The throughput model's JSON form (MODEL.json): ToJson and FromJson.
#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "estimator/core/error.h"
#include "estimator/detail/throughput_form.h"
#include "estimator/throughput.h"

namespace cloudtune::estimator {
namespace {

constexpr const char* kSchema = "cloudtune.throughput_model/2";

// Reads the fields of a model JSON; every error names the source and the field.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  [[noreturn]] void Fail(const std::string& what) const { throw InputError(source_ + ": " + what); }

  // o[key]: a finite number.
  double Number(const nlohmann::json& o, const char* key, const std::string& where) const {
    if (!o.contains(key)) Fail(where + "." + key + ": missing");
    const auto& v = o[key];
    if (!v.is_number()) Fail(where + "." + key + ": expected a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) Fail(where + "." + key + ": not finite");
    return d;
  }

  // o[key]: an integer in [min, 1e9].
  int Integer(const nlohmann::json& o, const char* key, const std::string& at, int min) const {
    const double x = Number(o, key, at);
    if (x != std::floor(x) || x < min || x > 1e9)
      Fail(at + "." + key + ": expected an integer >= " + std::to_string(min));
    return static_cast<int>(x);
  }

  // j[field]: an array.
  const nlohmann::json& Array(const nlohmann::json& j, const char* field) const {
    if (!j.contains(field) || !j[field].is_array())
      Fail(std::string("missing array \"") + field + "\"");
    return j[field];
  }

 private:
  const std::string& source_;
};

// Whether the entry says "identified": true.
bool Flag(const nlohmann::json& o) {
  return o.contains("identified") && o["identified"].is_boolean() && o["identified"].get<bool>();
}

void CheckSchema(const nlohmann::json& j, const Reader& r) {
  if (!j.is_object()) r.Fail("not a JSON object");
  if (!j.contains("schema") || !j["schema"].is_string())
    r.Fail(std::string("missing \"schema\" (expected \"") + kSchema + "\")");
  if (j["schema"] != kSchema)
    r.Fail("schema is \"" + j["schema"].get<std::string>() + "\", expected \"" + kSchema + "\"");
}

// "parameters": the core, as theta (log of the positive parameters) and identified flags.
void ReadCore(const nlohmann::json& j, const Reader& r, std::vector<double>* theta,
              std::vector<bool>* identified) {
  constexpr int kC = kNumThroughputParams;
  if (!j.contains("parameters") || !j["parameters"].is_array())
    r.Fail("missing array \"parameters\"");
  std::vector<double> core(kC, 0);
  std::vector<bool> core_id(kC, false), seen(kC, false);
  const auto& ps = j["parameters"];
  for (size_t k = 0; k < ps.size(); ++k) {
    const std::string at = "parameters[" + std::to_string(k) + "]";
    const auto& p = ps[k];
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string())
      r.Fail(at + ": expected an object with a \"name\"");
    const std::string name = p["name"];
    int i = 0;
    while (i < kC && name != ThroughputParamName(i)) ++i;
    if (i == kC) r.Fail(at + ": unknown parameter \"" + name + "\"");
    const double v = r.Number(p, "value", at + " (" + name + ")");
    if (detail::IsLogParam(i) && !(v > 0)) r.Fail(at + " (" + name + ").value: must be positive");
    if (i == kGamma && v < 1) r.Fail(at + " (gamma).value: must be >= 1");
    if (i == kOmega && !(v > 0 && v <= 1)) r.Fail(at + " (omega).value: must be in (0, 1]");
    core[i] = detail::IsLogParam(i) ? std::log(v) : v;
    core_id[i] = Flag(p);
    seen[i] = true;
  }
  for (int i = 0; i < kC; ++i)
    if (!seen[i]) r.Fail(std::string("parameters: missing \"") + ThroughputParamName(i) + "\"");
  *theta = core;
  *identified = core_id;
}

// Effects keyed by one integer (node count, batch size), increasing.
void ReadByValue(const nlohmann::json& j, const Reader& r, const char* field, const char* key,
                 std::vector<int>* values, int min, std::vector<double>* out,
                 std::vector<bool>* ids) {
  const auto& a = r.Array(j, field);
  for (size_t k = 0; k < a.size(); ++k) {
    const std::string at = std::string(field) + "[" + std::to_string(k) + "]";
    if (!a[k].is_object()) r.Fail(at + ": expected an object");
    const int x = r.Integer(a[k], key, at, min);
    if (!values->empty() && x <= values->back()) r.Fail(at + "." + key + ": must be increasing");
    values->push_back(x);
    out->push_back(r.Number(a[k], "value", at));
    ids->push_back(Flag(a[k]));
  }
}

// Effects keyed by (num_nodes, num_replicas), increasing.
void ReadByPlacement(const nlohmann::json& j, const Reader& r, const char* field,
                     std::vector<std::pair<int, int>>* values, int min, std::vector<double>* out,
                     std::vector<bool>* ids) {
  const auto& a = r.Array(j, field);
  for (size_t k = 0; k < a.size(); ++k) {
    const std::string at = std::string(field) + "[" + std::to_string(k) + "]";
    if (!a[k].is_object()) r.Fail(at + ": expected an object");
    const double nn = r.Number(a[k], "num_nodes", at), rr = r.Number(a[k], "num_replicas", at);
    if (nn != std::floor(nn) || rr != std::floor(rr) || nn < min || rr < nn || rr > 1e9)
      r.Fail(at + ": expected integers " + std::to_string(min) + " <= num_nodes <= num_replicas");
    const std::pair<int, int> key(static_cast<int>(nn), static_cast<int>(rr));
    if (!values->empty() && !(values->back() < key))
      r.Fail(at + ": placements must be sorted and distinct");
    values->push_back(key);
    out->push_back(r.Number(a[k], "value", at));
    ids->push_back(Flag(a[k]));
  }
}

// The effect arrays of a model JSON, in ThroughputModel's layout; their values and identified
// flags are appended to theta and identified (see ThroughputModel::theta()).
struct Effects {
  std::vector<int> node_counts, batch_sizes;
  std::vector<std::pair<int, int>> placements, compute_placements;
  std::vector<int> block_offset;  // theta index of each compute placement's block
};

// "batch_effects" and "sync_batch_effects": one pair per batch size.
void ReadBatchEffects(const nlohmann::json& j, const Reader& r, Effects* e,
                      std::vector<double>* theta, std::vector<bool>* identified) {
  std::vector<int> sync_sizes;
  std::vector<double> batch_v, sync_v;
  std::vector<bool> batch_id, sync_id;
  ReadByValue(j, r, "batch_effects", "local_bsz", &e->batch_sizes, 1, &batch_v, &batch_id);
  ReadByValue(j, r, "sync_batch_effects", "local_bsz", &sync_sizes, 1, &sync_v, &sync_id);
  if (sync_sizes != e->batch_sizes)
    r.Fail("sync_batch_effects: expected the local_bsz values of batch_effects");
  for (size_t k = 0; k < batch_v.size(); ++k) {
    theta->insert(theta->end(), {batch_v[k], sync_v[k]});
    identified->insert(identified->end(), {batch_id[k], sync_id[k]});
  }
}

// "placement_effects" and "compute_effects": one block per compute placement (its compute effect,
// then its placement effect when num_nodes >= 2 and num_replicas >= 2).
void ReadPlacementBlocks(const nlohmann::json& j, const Reader& r, Effects* e,
                         std::vector<double>* theta, std::vector<bool>* identified) {
  std::vector<double> place_v, comp_v;
  std::vector<bool> place_id, comp_id;
  ReadByPlacement(j, r, "placement_effects", &e->placements, 2, &place_v, &place_id);
  ReadByPlacement(j, r, "compute_effects", &e->compute_placements, 1, &comp_v, &comp_id);
  const char* kMismatch =
      "placement_effects: expected one entry per compute_effects entry with num_nodes >= 2 "
      "and num_replicas >= 2";
  size_t next_place = 0;
  for (size_t k = 0; k < e->compute_placements.size(); ++k) {
    const auto [nn, rr] = e->compute_placements[k];
    e->block_offset.push_back(static_cast<int>(theta->size()));
    theta->push_back(comp_v[k]);
    identified->push_back(comp_id[k]);
    if (nn >= 2 && rr >= 2) {
      if (next_place >= e->placements.size() ||
          e->placements[next_place] != e->compute_placements[k])
        r.Fail(kMismatch);
      theta->push_back(place_v[next_place]);
      identified->push_back(place_id[next_place]);
      ++next_place;
    }
  }
  if (next_place != e->placements.size()) r.Fail(kMismatch);
}

void ReadEffects(const nlohmann::json& j, const Reader& r, Effects* e, std::vector<double>* theta,
                 std::vector<bool>* identified) {
  ReadByValue(j, r, "node_effects", "num_nodes", &e->node_counts, 2, theta, identified);
  ReadBatchEffects(j, r, e, theta, identified);
  ReadPlacementBlocks(j, r, e, theta, identified);
}

// cov[field]: a kC x cols matrix, stored row-major in out.
void ReadMatrix(const nlohmann::json& cov, const Reader& r, const char* field, int cols,
                std::vector<double>* out) {
  constexpr int kC = kNumThroughputParams;
  const std::string dims = std::to_string(kC) + "x" + std::to_string(cols);
  if (!cov.contains(field) || !cov[field].is_array() || cov[field].size() != size_t(kC))
    r.Fail(std::string("covariance.") + field + ": expected a " + dims + " array");
  out->assign(size_t(kC) * cols, 0);
  for (int i = 0; i < kC; ++i) {
    const auto& row = cov[field][i];
    const std::string at = std::string("covariance.") + field + "[" + std::to_string(i) + "]";
    if (!row.is_array() || row.size() != size_t(cols))
      r.Fail(at + ": expected " + std::to_string(cols) + " numbers");
    for (int c = 0; c < cols; ++c) {
      if (!row[c].is_number() || !std::isfinite(row[c].get<double>()))
        r.Fail(at + "[" + std::to_string(c) + "]: expected a finite number");
      (*out)[size_t(i) * cols + c] = row[c].get<double>();
    }
  }
}

// cov["effect_pairs"]: (a, b, covariance) of effect indices 0 <= a <= b < num_effects, sorted.
std::vector<std::tuple<int, int, double>> ReadEffectPairs(const nlohmann::json& cov,
                                                          const Reader& r, int num_effects) {
  if (!cov.contains("effect_pairs") || !cov["effect_pairs"].is_array())
    r.Fail("covariance.effect_pairs: expected an array of [a, b, value]");
  std::vector<std::tuple<int, int, double>> pairs;
  for (size_t k = 0; k < cov["effect_pairs"].size(); ++k) {
    const auto& e = cov["effect_pairs"][k];
    const std::string at = "covariance.effect_pairs[" + std::to_string(k) + "]";
    if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        !e[2].is_number() || !std::isfinite(e[2].get<double>()))
      r.Fail(at + ": expected [a, b, value] with integer effect indices");
    const int a = e[0].get<int>(), b = e[1].get<int>();
    if (a < 0 || b < a || b >= num_effects)
      r.Fail(at + ": expected 0 <= a <= b < " + std::to_string(num_effects));
    if (!pairs.empty() &&
        std::tie(std::get<0>(pairs.back()), std::get<1>(pairs.back())) >= std::tie(a, b))
      r.Fail(at + ": pairs must be sorted and distinct");
    pairs.emplace_back(a, b, e[2].get<double>());
  }
  return pairs;
}

// "fit" (optional, as are its fields).
void ReadFitStats(const nlohmann::json& j, ThroughputFitStats* stats) {
  if (!j.contains("fit") || !j["fit"].is_object()) return;
  const auto& f = j["fit"];
  auto get = [&](const char* k, auto* out) {
    if (f.contains(k) && f[k].is_number()) *out = f[k].get<std::decay_t<decltype(*out)>>();
  };
  get("configurations", &stats->configurations);
  get("residuals", &stats->residuals);
  get("iterations", &stats->iterations);
  get("seconds", &stats->seconds);
  get("initial_cost", &stats->initial_cost);
  get("final_cost", &stats->final_cost);
  get("rms_log_step_residual", &stats->rms_log_step);
  get("mape_step", &stats->mape_step);
  get("max_ape_step", &stats->max_ape_step);
  if (f.contains("termination") && f["termination"].is_string())
    stats->termination = f["termination"];
}
}  // namespace

nlohmann::json ThroughputModel::ToJson() const {
  constexpr int kC = kNumThroughputParams;
  nlohmann::json j;
  j["schema"] = kSchema;
  j["model"] = {{"form",
                 "T_c = (alpha_c + beta_c*b*(b/b_ref)^(kappa-1))*exp(batch_effect[b] + "
                 "compute_effect[N,R] + zeta_c*(R/N-1)); "
                 "T_n = 0 (R=1), "
                 "(alpha_l + beta_l*(R-2))*exp(sync_batch_effect[b]) (N=1), (alpha_n + "
                 "beta_n*log(R/2) + delta_n*(R/N-1)/(N-1))*exp(node_effect[N] + "
                 "placement_effect[N,R] + sync_batch_effect[b]) (N>=2); "
                 "T = T_c + T_n - (a^-gamma + T_n^-gamma)^(-1/gamma), a = omega*T_c; "
                 "step = s*T_c + T (s = accum_steps)"},
                {"b_ref", b_ref_},
                {"noise_sigma", noise_sigma_},
                {"node_effect_sigma", node_effect_sigma_},
                {"placement_effect_sigma", placement_effect_sigma_},
                {"batch_effect_sigma", batch_effect_sigma_},
                {"compute_effect_sigma", compute_effect_sigma_},
                {"sync_batch_effect_sigma", sync_batch_effect_sigma_},
                {"growth_sigma", growth_sigma_},
                {"loo_variance_scale", loo_variance_scale_}};
  nlohmann::json ps = nlohmann::json::array();
  for (int i = 0; i < kC; ++i) {
    ps.push_back({{"name", ThroughputParamName(i)},
                  {"value", param(i)},
                  {"unit", ThroughputParamUnit(i)},
                  {"identified", static_cast<bool>(identified_[i])},
                  {"sigma", param_sigma(i)},
                  {"sigma_scale", detail::IsLogParam(i) ? "log" : "linear"}});
  }
  j["parameters"] = ps;
  auto effect = [&](int i, nlohmann::json o) {
    o["value"] = theta_[i];
    o["identified"] = static_cast<bool>(identified_[i]);
    o["sigma"] = param_sigma(i);
    return o;
  };
  // Effects are log multipliers: node, placement and sync_batch of T_n; batch and compute of T_c.
  nlohmann::json ne = nlohmann::json::array(), pe = nlohmann::json::array(),
                 be = nlohmann::json::array(), ce = nlohmann::json::array(),
                 se = nlohmann::json::array();
  for (int n : node_counts_) ne.push_back(effect(NodeIndex(n), {{"num_nodes", n}}));
  for (const auto& [nn, rr] : placements_)
    pe.push_back(effect(PlaceIndex(nn, rr), {{"num_nodes", nn}, {"num_replicas", rr}}));
  for (int b : batch_sizes_) be.push_back(effect(BatchIndex(b), {{"local_bsz", b}}));
  for (const auto& [nn, rr] : compute_placements_)
    ce.push_back(effect(ComputeIndex(nn, rr), {{"num_nodes", nn}, {"num_replicas", rr}}));
  for (int b : batch_sizes_) se.push_back(effect(SyncBatchIndex(b), {{"local_bsz", b}}));
  j["node_effects"] = ne;
  j["placement_effects"] = pe;
  j["batch_effects"] = be;
  j["compute_effects"] = ce;
  j["sync_batch_effects"] = se;
  // Posterior covariance of theta = [core (log or linear, as sigma_scale) | node effects | per
  // batch size: batch effect, sync_batch effect | per compute_effects entry: its compute effect,
  // then the placement effect of the same (num_nodes, num_replicas) if listed]: the core block,
  // the core x effect block and the effect pairs that share a measured configuration (others 0).
  const int ne_total = num_effects();
  nlohmann::json core = nlohmann::json::array(), cross = nlohmann::json::array(),
                 pairs = nlohmann::json::array();
  for (int r = 0; r < kC; ++r) {
    nlohmann::json row = nlohmann::json::array(), xrow = nlohmann::json::array();
    for (int c = 0; c < kC; ++c) row.push_back(covariance(r, c));
    for (int e = 0; e < ne_total; ++e) xrow.push_back(covariance(r, kC + e));
    core.push_back(row);
    cross.push_back(xrow);
  }
  for (const auto& p : cov_pairs_) pairs.push_back({p.a, p.b, p.v});
  j["covariance"] = {{"core", core}, {"core_effect", cross}, {"effect_pairs", pairs}};
  j["fit"] = {{"configurations", stats_.configurations},
              {"residuals", stats_.residuals},
              {"iterations", stats_.iterations},
              {"seconds", stats_.seconds},
              {"initial_cost", stats_.initial_cost},
              {"final_cost", stats_.final_cost},
              {"rms_log_step_residual", stats_.rms_log_step},
              {"mape_step", stats_.mape_step},
              {"max_ape_step", stats_.max_ape_step},
              {"termination", stats_.termination}};
  return j;
}

ThroughputModel ThroughputModel::FromJson(const nlohmann::json& j, const std::string& source) {
  constexpr int kC = kNumThroughputParams;
  const Reader r(source);
  CheckSchema(j, r);
  ThroughputModel m;
  if (!j.contains("model") || !j["model"].is_object()) r.Fail("missing object \"model\"");
  const auto& mo = j["model"];
  m.b_ref_ = r.Number(mo, "b_ref", "model");
  if (!(m.b_ref_ > 0)) r.Fail("model.b_ref: must be positive");
  m.noise_sigma_ = r.Number(mo, "noise_sigma", "model");
  m.node_effect_sigma_ = r.Number(mo, "node_effect_sigma", "model");
  m.placement_effect_sigma_ = r.Number(mo, "placement_effect_sigma", "model");
  m.batch_effect_sigma_ = r.Number(mo, "batch_effect_sigma", "model");
  m.compute_effect_sigma_ = r.Number(mo, "compute_effect_sigma", "model");
  m.sync_batch_effect_sigma_ = r.Number(mo, "sync_batch_effect_sigma", "model");
  // Absent from models written before the growth term: those predicted without it.
  m.growth_sigma_ = mo.contains("growth_sigma") ? r.Number(mo, "growth_sigma", "model") : 0.0;
  // Absent from models written before the leave-one-out check: 1, the variance as stated.
  m.loo_variance_scale_ =
      mo.contains("loo_variance_scale") ? r.Number(mo, "loo_variance_scale", "model") : 1.0;
  if (!(m.loo_variance_scale_ >= 1) || !std::isfinite(m.loo_variance_scale_))
    r.Fail("model.loo_variance_scale: must be a finite number >= 1");
  for (double s :
       {m.noise_sigma_, m.node_effect_sigma_, m.placement_effect_sigma_, m.batch_effect_sigma_,
        m.compute_effect_sigma_, m.sync_batch_effect_sigma_, m.growth_sigma_})
    if (s < 0) r.Fail("model: sigmas must be >= 0");
  ReadCore(j, r, &m.theta_, &m.identified_);
  Effects e;
  ReadEffects(j, r, &e, &m.theta_, &m.identified_);
  m.node_counts_ = std::move(e.node_counts);
  m.batch_sizes_ = std::move(e.batch_sizes);
  m.placements_ = std::move(e.placements);
  m.compute_placements_ = std::move(e.compute_placements);
  m.block_offset_ = std::move(e.block_offset);
  const int ne = m.num_effects();
  if (!j.contains("covariance") || !j["covariance"].is_object())
    r.Fail("missing object \"covariance\"");
  const auto& cov = j["covariance"];
  ReadMatrix(cov, r, "core", kC, &m.cov_core_);
  ReadMatrix(cov, r, "core_effect", ne, &m.cov_cross_);
  for (const auto& [a, b, v] : ReadEffectPairs(cov, r, ne)) m.cov_pairs_.push_back({a, b, v});
  ReadFitStats(j, &m.stats_);
  return m;
}
}  // namespace cloudtune::estimator
