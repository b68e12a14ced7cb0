// Reads a job's sidecar and saved state for `cloudtune report` and `cloudtune recommend --from`.
#include "cli/sidecar_reader.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "estimator/core/error.h"
#include "estimator/core/trace.h"
#include "plugin/runtime/state.h"

namespace cloudtune::cli {

std::vector<const SidecarRecord*> Sidecar::OfKind(const std::string& kind) const {
  std::vector<const SidecarRecord*> out;
  for (const auto& r : records)
    if (r.json.value("kind", "") == kind) out.push_back(&r);
  return out;
}

const SidecarRecord* Sidecar::Last(const std::string& kind) const {
  for (auto it = records.rbegin(); it != records.rend(); ++it)
    if (it->json.value("kind", "") == kind) return &*it;
  return nullptr;
}

std::vector<std::string> Sidecar::Problems() const {
  std::vector<std::string> p;
  if (truncated_line > 0)
    p.push_back("line " + std::to_string(truncated_line) +
                " is truncated (the job was killed while writing it); it was skipped");
  if (!bad_lines.empty()) {
    std::string list;
    for (size_t i = 0; i < bad_lines.size() && i < 10; ++i)
      list += (i ? ", " : "") + std::to_string(bad_lines[i]);
    if (bad_lines.size() > 10) list += ", ...";
    p.push_back(std::to_string(bad_lines.size()) + " unparseable line(s) skipped (" + list + ")");
  }
  if (!Last("start"))
    p.push_back("no start record: the job's options and configuration are unknown");
  if (!Last("measurement")) p.push_back("no measurement record: no step times or noise scale");
  if (!Last("recommendation"))
    p.push_back("no recommendation record: the tuner had not published one");
  if (!Last("end")) {
    // The last record's step as written; a damaged file may hold any JSON value there.
    std::string at = "?";
    if (!records.empty()) {
      const auto step = records.back().json.find("step");
      if (step != records.back().json.end() && step->is_number_integer()) at = step->dump();
    }
    p.push_back("no end record: the job was killed or is still running; the report stops at step " +
                at);
  }
  return p;
}

Sidecar ReadSidecar(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  Sidecar s;
  s.path = path;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const bool complete = !in.eof();  // getline stopped at a newline, not at the end of the file
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++s.lines;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("kind") || !j["kind"].is_string()) {
      if (!complete)
        s.truncated_line = number;
      else
        s.bad_lines.push_back(number);
      continue;
    }
    const auto schema = j.find("schema");
    if (schema == j.end() || !schema->is_string() || *schema != kSidecarSchema) {
      const std::string got = schema == j.end() ? "missing" : "'" + schema->dump() + "'";
      throw InputError(path + ":" + std::to_string(number) + ": schema " + got + " is not " +
                       kSidecarSchema + " (not a cloudtune sidecar, or one of another version)");
    }
    s.records.push_back({number, std::move(j)});
  }
  if (s.records.empty())
    throw InputError(path + ": no sidecar record" +
                     (s.lines ? " (" + std::to_string(s.lines) + " unparseable line(s))"
                              : std::string(" (empty file)")));
  return s;
}

namespace {

// Field access that names file, line and field on failure.
class Fields {
 public:
  explicit Fields(std::string where) : where_(std::move(where)) {}
  const nlohmann::json& Object(const nlohmann::json& j, const std::string& name) const {
    const auto it = j.find(Leaf(name));
    if (it == j.end() || !it->is_object()) Fail(name, "missing or not an object");
    return *it;
  }
  double Number(const nlohmann::json& j, const std::string& name) const {
    const auto it = j.find(Leaf(name));
    if (it == j.end() || !it->is_number()) Fail(name, "missing or not a number");
    return it->get<double>();
  }
  int Integer(const nlohmann::json& j, const std::string& name, int min) const {
    const double v = Number(j, name);
    // Range first: converting a double outside int's range is undefined.
    if (!(v >= min && v <= std::numeric_limits<int>::max()) || v != std::floor(v))
      Fail(name, "must be an integer >= " + std::to_string(min));
    return static_cast<int>(v);
  }
  std::string String(const nlohmann::json& j, const std::string& name) const {
    const auto it = j.find(Leaf(name));
    if (it == j.end() || !it->is_string()) Fail(name, "missing or not a string");
    return it->get<std::string>();
  }
  [[noreturn]] void Fail(const std::string& name, const std::string& why) const {
    throw InputError(where_ + ": " + name + ": " + why);
  }

 private:
  static std::string Leaf(const std::string& name) {
    const size_t dot = name.rfind('.');
    return dot == std::string::npos ? name : name.substr(dot + 1);
  }
  std::string where_;
};

}  // namespace

RecordedInputs InputsFromSidecar(const Sidecar& s) {
  RecordedInputs r;
  const SidecarRecord* rec = s.Last("recommendation");
  if (!rec)
    throw InputError(s.path + ": no recommendation record, so no recorded inputs to re-run " +
                     "(the tuner had not published one)");
  r.where = s.path + ":" + std::to_string(rec->line);
  const Fields f(r.where);
  if (const SidecarRecord* start = s.Last("start")) {
    const auto opts = start->json.find("options");
    if (opts != start->json.end() && opts->is_object())
      for (const auto& [k, v] : opts->items())
        if (v.is_string()) r.options[k] = v.get<std::string>();
    if (rec->json.contains("time") && start->json.contains("time") &&
        rec->json["time"].is_number() && start->json["time"].is_number())
      r.snapshot.elapsed_seconds =
          std::max(0.0, rec->json["time"].get<double>() - start->json["time"].get<double>());
  } else {
    r.warnings.push_back(s.path + ": no start record: the job's options are unknown; defaults " +
                         "and flags are used");
  }
  const nlohmann::json& in = f.Object(rec->json, "inputs");
  core::Snapshot& snap = r.snapshot;
  snap.step = static_cast<long long>(f.Number(in, "inputs.step"));
  snap.progress = f.Number(in, "inputs.progress");
  const nlohmann::json& noise = f.Object(in, "inputs.noise");
  snap.noise.grad_sqr = f.Number(noise, "inputs.noise.grad_sqr");
  snap.noise.grad_var = f.Number(noise, "inputs.noise.grad_var");
  snap.noise.base_batch = f.Number(noise, "inputs.noise.base_batch");
  snap.noise.biased = noise.value("biased", false);
  snap.noise_valid = true;
  const nlohmann::json& cur = f.Object(in, "inputs.current");
  snap.current.num_nodes = f.Integer(cur, "inputs.current.num_nodes", 1);
  snap.current.num_replicas = f.Integer(cur, "inputs.current.num_replicas", 1);
  snap.gpus_per_node = f.Integer(cur, "inputs.current.gpus_per_node", 1);
  snap.current.local_bsz = f.Integer(cur, "inputs.current.local_bsz", 1);
  snap.current.accum_steps = f.Integer(cur, "inputs.current.accum_steps", 0);
  snap.current.instance_type = f.String(cur, "inputs.current.instance_type");
  std::istringstream csv(f.String(in, "inputs.profile_csv"));
  snap.profile = estimator::ParseTrace(csv, r.where + ": inputs.profile_csv");
  const auto exposure = in.find("spot_exposure");  // optional: older sidecars have none
  if (exposure != in.end())
    snap.spot_exposure = runtime::SpotExposureFromJson(*exposure, r.where, "inputs.spot_exposure");
  const auto bytes = in.find("gradient_bytes");  // optional: older sidecars have none
  if (bytes != in.end()) {
    snap.gradient_bytes = f.Number(in, "inputs.gradient_bytes");
    if (snap.gradient_bytes < 0) f.Fail("inputs.gradient_bytes", "must be >= 0");
  }
  const auto sf = rec->json.find("straggler_factor");
  if (sf != rec->json.end() && sf->is_number()) snap.straggler_factor = sf->get<double>();
  const auto models = rec->json.find("models");
  if (models != rec->json.end() && models->is_object()) {
    const auto eff = models->find("efficiency");
    if (eff != models->end() && eff->is_object())
      r.efficiency = estimator::EfficiencyModel::FromJson(*eff, r.where + ": models.efficiency");
  }
  const auto hist = in.find("noise_history_batches");
  if (!r.efficiency && hist != in.end() && hist->is_array()) {
    std::set<double> batches;
    for (const auto& b : *hist)
      if (b.is_number()) batches.insert(b.get<double>());
    if (batches.size() > 1)
      r.warnings.push_back(r.where +
                           ": the job fitted its efficiency drift model from noise observations "
                           "the sidecar does not keep; the re-run uses the last noise state");
  }
  return r;
}

bool IsStateFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("schema") && j["schema"] == runtime::kStateSchema;
}

RecordedInputs InputsFromState(const std::string& path) {
  const runtime::LoadResult lr = runtime::LoadState(path, "");
  if (lr.status == runtime::LoadStatus::kMissing) throw InputError(path + ": cannot open");
  if (lr.status != runtime::LoadStatus::kLoaded || !lr.state) throw InputError(lr.message);
  RecordedInputs r;
  r.where = path;
  r.snapshot = runtime::RestoreSnapshot(*lr.state);
  r.snapshot.noise_valid = true;
  return r;
}

}  // namespace cloudtune::cli
