#include "plugin/runtime/state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "estimator/core/atomic_file.h"
#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "plugin/runtime/detail/time.h"

namespace cloudtune::runtime {
namespace {

using detail::UtcNow;
using nlohmann::json;

std::string Checksum(const json& payload) {
  // FNV-1a 64 over the canonical dump (nlohmann objects are key-sorted, numbers round-trip).
  const std::string s = payload.dump();
  unsigned long long h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", h);
  return buf;
}

[[noreturn]] void Bad(const std::string& source, const std::string& what) {
  throw InputError(source + ": " + what);
}

// `where` is a C string so that no call makes a temporary that the returned reference could seem to
// point into (GCC 14's -Wdangling-reference).
const json& Member(const json& j, const char* name, const std::string& source, const char* where) {
  const std::string at = where;
  if (!j.is_object()) Bad(source, at + " is not an object");
  auto it = j.find(name);
  if (it == j.end()) Bad(source, "missing \"" + at + (at.empty() ? "" : ".") + name + "\"");
  return *it;
}

double Number(const json& j, const char* name, const std::string& source, const std::string& where,
              double min_value) {
  const json& v = Member(j, name, source, where.c_str());
  const std::string field = (where.empty() ? "" : where + ".") + name;
  if (!v.is_number()) Bad(source, "\"" + field + "\" is not a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < min_value)
    Bad(source,
        "\"" + field + "\" = " + v.dump() + " is out of range (>= " + json(min_value).dump() + ")");
  return d;
}

long long Integer(const json& j, const char* name, const std::string& source,
                  const std::string& where, long long min_value) {
  const json& v = Member(j, name, source, where.c_str());
  const std::string field = (where.empty() ? "" : where + ".") + name;
  if (!v.is_number_integer()) Bad(source, "\"" + field + "\" is not an integer");
  const long long x = v.get<long long>();
  if (x < min_value)
    Bad(source, "\"" + field + "\" = " + std::to_string(x) +
                    " is out of range (>= " + std::to_string(min_value) + ")");
  return x;
}

std::string String(const json& j, const char* name, const std::string& source,
                   const std::string& where) {
  const json& v = Member(j, name, source, where.c_str());
  if (!v.is_string())
    Bad(source,
        "\"" + (where.empty() ? "" : where + ".") + std::string(name) + "\" is not a string");
  return v.get<std::string>();
}

json KeyToJson(const core::ConfigKey& k) {
  return {{"num_nodes", k.num_nodes},
          {"num_replicas", k.num_replicas},
          {"local_bsz", k.local_bsz},
          {"accum_steps", k.accum_steps},
          {"instance_type", k.instance_type}};
}

core::ConfigKey KeyFromJson(const json& j, const std::string& source, const std::string& where) {
  core::ConfigKey k;
  k.num_nodes = static_cast<int>(Integer(j, "num_nodes", source, where, 1));
  k.num_replicas = static_cast<int>(Integer(j, "num_replicas", source, where, 1));
  k.local_bsz = static_cast<int>(Integer(j, "local_bsz", source, where, 1));
  k.accum_steps = static_cast<int>(Integer(j, "accum_steps", source, where, 0));
  k.instance_type = String(j, "instance_type", source, where);
  if (k.num_replicas < k.num_nodes) Bad(source, "\"" + where + "\": num_replicas < num_nodes");
  return k;
}

}  // namespace

bool StateOptions::IsValid(std::string* error) const {
  if (!(save_seconds > 0) || !std::isfinite(save_seconds)) {
    if (error) *error = "state save_seconds must be > 0";
    return false;
  }
  return true;
}

json SavedState::ToJson() const {
  json prof = json::array();
  for (const auto& m : profile) {
    json e = KeyToJson(m.key);
    e["step_time"] = m.step_time;
    e["sync_time"] = m.sync_time;
    e["rows"] = m.rows;
    e["max_gpus_per_node"] = m.max_gpus_per_node;
    prof.push_back(std::move(e));
  }
  return {{"step", step},
          {"progress", progress},
          {"current", KeyToJson(current)},
          {"current_gpus_per_node", current_gpus_per_node},
          {"profile", std::move(prof)},
          {"noise",
           {{"grad_sqr", noise.grad_sqr},
            {"grad_var", noise.grad_var},
            {"base_batch", noise.base_batch},
            {"biased", noise.biased}}},
          {"gns", gns},
          {"models", models},
          {"recommendation", recommendation},
          {"spot_exposure", SpotExposureJson(spot_exposure)},
          {"gradient_bytes", gradient_bytes}};
}

json SpotExposureJson(const std::map<std::string, core::SpotExposure>& exposure) {
  json j = json::object();
  for (const auto& [type, e] : exposure)
    j[type] = {{"node_hours", e.node_hours}, {"revocations", e.revocations}};
  return j;
}

SavedState SavedState::FromJson(const json& j, const std::string& source) {
  if (!j.is_object()) Bad(source, "\"state\" is not an object");
  SavedState s;
  s.step = Integer(j, "step", source, "", 0);
  s.progress = Number(j, "progress", source, "", 0);
  s.current = KeyFromJson(Member(j, "current", source, ""), source, "current");
  if (j.contains("current_gpus_per_node"))  // optional: older files have none
    s.current_gpus_per_node = static_cast<int>(Integer(j, "current_gpus_per_node", source, "", 0));
  const json& prof = Member(j, "profile", source, "");
  if (!prof.is_array()) Bad(source, "\"profile\" is not an array");
  for (size_t i = 0; i < prof.size(); ++i) {
    const std::string where = "profile[" + std::to_string(i) + "]";
    core::Measurement m;
    m.key = KeyFromJson(prof[i], source, where);
    m.step_time = Number(prof[i], "step_time", source, where, 0);
    m.sync_time = Number(prof[i], "sync_time", source, where, 0);
    m.rows = static_cast<int>(Integer(prof[i], "rows", source, where, 1));
    m.max_gpus_per_node = static_cast<int>(Integer(prof[i], "max_gpus_per_node", source, where, 0));
    if (!(m.step_time > 0) || m.sync_time >= m.step_time)
      Bad(source, "\"" + where + "\": need 0 <= sync_time < step_time and step_time > 0");
    s.profile.push_back(std::move(m));
  }
  const json& n = Member(j, "noise", source, "");
  s.noise.grad_sqr = Number(n, "grad_sqr", source, "noise", 0);
  s.noise.grad_var = Number(n, "grad_var", source, "noise", 0);
  s.noise.base_batch = Number(n, "base_batch", source, "noise", 0);
  if (!(s.noise.base_batch > 0)) Bad(source, "\"noise.base_batch\" must be > 0");
  const json& b = Member(n, "biased", source, "noise");
  if (!b.is_boolean()) Bad(source, "\"noise.biased\" is not a boolean");
  s.noise.biased = b.get<bool>();
  s.gns = Member(j, "gns", source, "");
  if (!s.gns.is_object()) Bad(source, "\"gns\" is not an object");
  s.models = Member(j, "models", source, "");
  if (!s.models.is_object()) Bad(source, "\"models\" is not an object");
  s.recommendation = Member(j, "recommendation", source, "");
  if (j.contains("spot_exposure"))
    s.spot_exposure = SpotExposureFromJson(j["spot_exposure"], source, "spot_exposure");
  if (j.contains("gradient_bytes")) s.gradient_bytes = Number(j, "gradient_bytes", source, "", 0);
  return s;
}

std::map<std::string, core::SpotExposure> SpotExposureFromJson(const json& j,
                                                               const std::string& source,
                                                               const std::string& where) {
  if (!j.is_object()) Bad(source, "\"" + where + "\" is not an object");
  std::map<std::string, core::SpotExposure> out;
  for (const auto& [type, v] : j.items()) {
    const std::string field = where + "." + type;
    core::SpotExposure x;
    x.node_hours = Number(v, "node_hours", source, field, 0);
    x.revocations = static_cast<int>(Integer(v, "revocations", source, field, 0));
    out[type] = x;
  }
  return out;
}

bool SaveState(const std::string& path, const SavedState& s, std::string* error) {
  auto fail = [&](const std::string& what) {
    if (error) *error = path + ": " + what;
    return false;
  };
  if (path.empty()) return fail("no state path");
  std::string text;
  try {
    json payload = s.ToJson();
    json doc = {{"schema", kStateSchema},
                {"job_id", s.job_id},
                {"saved_at", UtcNow()},
                {"checksum", Checksum(payload)},
                {"state", std::move(payload)}};
    text = doc.dump() + "\n";
  } catch (const std::exception& e) {  // e.g. invalid UTF-8 in a string
    return fail(std::string("cannot serialise state: ") + e.what());
  }
  std::string why;
  if (!core::WriteFileAtomically(path, text, &why)) {
    if (error) *error = why;
    return false;
  }
  return true;
}

LoadResult LoadState(const std::string& path, const std::string& expected_job_id) {
  LoadResult r;
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return r;  // kMissing: fresh start
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    r.status = LoadStatus::kRejected;
    r.message = path + ": cannot open: " + std::strerror(errno);
    return r;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  r.status = LoadStatus::kRejected;
  if (text.empty()) {
    r.message = path + ": empty state file (truncated?); ignored";
    return r;
  }
  json doc;
  try {
    doc = core::ParseJson(text, path);
  } catch (const InputError& e) {
    r.message = std::string(e.what()) + "; ignored";
    return r;
  }
  try {
    if (!doc.is_object()) Bad(path, "not a cloudtune state file (top level is not an object)");
    auto schema = doc.find("schema");
    if (schema == doc.end() || !schema->is_string())
      Bad(path, "not a cloudtune state file (no \"schema\")");
    if (*schema != kStateSchema)
      Bad(path,
          "foreign state file: schema " + schema->dump() + ", expected \"" + kStateSchema + "\"");
    const std::string job = String(doc, "job_id", path, "");
    if (!expected_job_id.empty() && job != expected_job_id)
      Bad(path, "foreign state file: saved by job \"" + job + "\", this job is \"" +
                    expected_job_id + "\"");
    const std::string sum = String(doc, "checksum", path, "");
    const json& payload = Member(doc, "state", path, "");
    if (Checksum(payload) != sum) Bad(path, "checksum mismatch (file was modified or corrupted)");
    SavedState s = SavedState::FromJson(payload, path);
    s.job_id = job;
    if (auto at = doc.find("saved_at"); at != doc.end() && at->is_string()) s.saved_at = *at;
    r.state = std::move(s);
    r.status = LoadStatus::kLoaded;
  } catch (const InputError& e) {
    r.message = std::string(e.what()) + "; ignored";
  } catch (const std::exception& e) {
    r.message = path + ": " + e.what() + "; ignored";
  }
  return r;
}

SavedState MakeSavedState(const core::Snapshot& s, const nlohmann::json* recommendation,
                          const std::string& job_id, nlohmann::json gns) {
  SavedState st;
  st.job_id = job_id;
  st.step = s.step;
  st.progress = std::max(0.0, s.progress);
  st.current = s.current;
  st.current_gpus_per_node = s.gpus_per_node;
  st.profile = s.profile;
  st.noise = s.noise;
  st.gns = gns.is_object() ? std::move(gns) : nlohmann::json::object();
  st.spot_exposure = s.spot_exposure;
  st.gradient_bytes = s.gradient_bytes;
  if (recommendation) {
    st.recommendation = *recommendation;
    if (recommendation->is_object() && recommendation->contains("models") &&
        (*recommendation)["models"].is_object())
      st.models = (*recommendation)["models"];
  }
  if (!s.noise_history.empty()) {
    nlohmann::json h = nlohmann::json::array();
    for (const auto& o : s.noise_history)
      h.push_back({o.batch, o.progress, o.iteration, o.grad_sqr, o.grad_var});
    st.gns["noise_history"] = std::move(h);
  }
  return st;
}

core::Snapshot RestoreSnapshot(const SavedState& state) {
  core::Snapshot s;
  s.step = state.step;
  s.progress = state.progress;
  s.current = state.current;
  s.gpus_per_node = state.current_gpus_per_node;
  s.profile = state.profile;
  s.noise = state.noise;
  s.spot_exposure = state.spot_exposure;
  s.gradient_bytes = state.gradient_bytes;
  if (state.gns.is_object() && state.gns.contains("noise_history") &&
      state.gns["noise_history"].is_array()) {
    for (const auto& row : state.gns["noise_history"]) {
      if (!row.is_array() || row.size() != 5) continue;
      bool ok = true;
      for (const auto& v : row) ok = ok && v.is_number() && std::isfinite(v.get<double>());
      if (!ok) continue;
      s.noise_history.push_back({row[0].get<double>(), row[1].get<double>(), row[2].get<double>(),
                                 row[3].get<double>(), row[4].get<double>()});
    }
  }
  return s;
}

}  // namespace cloudtune::runtime
