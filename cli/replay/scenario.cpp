// Scenario files of the replay (cli/replay/replay.h): parsing, measured truth, spot traces.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "cli/replay/replay.h"
#include "estimator/core/error.h"
#include "estimator/core/json_file.h"

namespace cloudtune::replay {

namespace {

std::string JoinPath(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || dir.empty()) return p;
  return dir + "/" + p;
}

// Reads a file the scenario names at `where` (its file and field): a file that cannot be read, or
// whose content is bad, is reported under the scenario's field as well as by its own name.
template <class Read>
auto Referenced(const std::string& where, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }
}

// An integer member that fits an int, or `dflt` when absent. (nlohmann's get<int> of 1e30 or of a
// 64-bit integer is an out-of-range conversion, undefined for a floating-point value.)
int IntField(const nlohmann::json& j, const char* key, int dflt, const std::string& where) {
  if (!j.contains(key)) return dflt;
  const nlohmann::json& v = j[key];
  if (!v.is_number_integer() || v < std::numeric_limits<int>::min() ||
      v > std::numeric_limits<int>::max())
    throw InputError(where + ": " + key + ": not an integer");
  return v.get<int>();
}

// Gavel throughputs: see replay.h for the interpretation.
std::vector<core::Measurement> ReadGavel(const nlohmann::json& g, const std::string& where,
                                         const std::string& dir, const std::string& type) {
  for (const char* k : {"file", "gpu", "model", "nodes", "replicas"})
    if (!g.contains(k)) throw InputError(where + ": missing field '" + std::string(k) + "'");
  const std::string path = JoinPath(dir, g["file"].get<std::string>());
  const nlohmann::json data =
      Referenced(where + ": file", [&] { return core::ReadJsonFile(path); });
  const int nodes = IntField(g, "nodes", 0, where), replicas = IntField(g, "replicas", 0, where);
  if (nodes < 1 || replicas < nodes || replicas % nodes)
    throw InputError(where + ": nodes/replicas: need replicas a positive multiple of nodes");
  std::string gpu = g["gpu"].get<std::string>();
  if (nodes > 1) gpu += "_unconsolidated";
  if (!data.contains(gpu)) throw InputError(where + ": gpu: '" + gpu + "' not in " + path);
  const std::string prefix = "('" + g["model"].get<std::string>() + " (batch size ";
  const std::string suffix = ")', " + std::to_string(replicas) + ")";
  std::vector<core::Measurement> out;
  for (auto& [key, val] : data[gpu].items()) {
    if (key.rfind(prefix, 0) != 0 || key.size() < prefix.size() + suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const int b = std::stoi(key.substr(prefix.size()));
    if (!val.contains("null") || !val["null"].is_number()) continue;
    const double sps = val["null"].get<double>();
    if (!(sps > 0)) continue;  // 0 = did not run (e.g. out of memory)
    core::Measurement m;
    m.key.instance_type = type;
    m.key.num_nodes = nodes;
    m.key.num_replicas = replicas;
    m.key.local_bsz = b;
    m.step_time = replicas / sps;
    m.sync_time = 0;
    m.rows = 1;
    m.max_gpus_per_node = replicas / nodes;
    out.push_back(m);
  }
  if (out.empty())
    throw InputError(where + ": no '" + g["model"].get<std::string>() + "' throughput for " +
                     std::to_string(replicas) + " replicas in " + path);
  return out;
}

// Catalog rows given as JSON objects: turned into CSV and parsed by the catalog parser.
// Rows given as JSON objects ({"column": value, ...}; "note" ignored), turned into one CSV text per
// row and handed to `parse` with the row's name ("WHERE[i]") for its messages.
void ForEachCsvRow(const nlohmann::json& rows, const std::string& where,
                   const std::function<void(std::istream&, const std::string&)>& parse) {
  if (!rows.is_array()) throw InputError(where + ": not an array");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string row = where + "[" + std::to_string(i) + "]";
    if (!r.is_object()) throw InputError(row + ": not an object");
    std::string header, values;
    for (auto& [k, v] : r.items()) {
      if (k == "note") continue;
      header += (header.empty() ? "" : ",") + k;
      values += (values.empty() ? "" : ",") + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    std::istringstream in(header + "\n" + values + "\n");
    parse(in, row);
  }
}

double NumberField(const nlohmann::json& j, const char* key, double dflt, const std::string& where,
                   bool positive) {
  if (!j.contains(key)) return dflt;
  if (!j[key].is_number()) throw InputError(where + ": " + key + ": not a number");
  double v = j[key].get<double>();
  if (!std::isfinite(v) || v < 0 || (positive && v == 0))
    throw InputError(where + ": " + key + ": must be " + (positive ? "> 0" : ">= 0"));
  return v;
}

// "validation" and "target_metric": the measured truth of the steps (see replay.h).
void ParseMeasuredTruth(const nlohmann::json& j, const std::string& name,
                        const std::string& base_dir, Scenario* out) {
  Scenario& s = *out;
  const auto& v = j["validation"];
  if (!v.is_object() || v.empty())
    throw InputError(name + ": validation: expected an object {\"BATCH\": \"PATH\", ...}");
  std::map<int, std::string> runs;
  for (auto it = v.begin(); it != v.end(); ++it) {
    int b = 0;
    try {
      size_t used = 0;
      b = std::stoi(it.key(), &used);
      if (used != it.key().size()) b = 0;
    } catch (const std::exception&) {
      b = 0;
    }
    if (b < 1 || !it.value().is_string())
      throw InputError(name + ": validation: \"" + it.key() +
                       "\": expected a batch size (>= 1) naming a validation CSV path");
    runs[b] = JoinPath(base_dir, it.value().get<std::string>());
  }
  const MeasuredSteps::Carry carry =
      j.contains("carry")
          ? MeasuredSteps::ParseCarry(j["carry"].get<std::string>(), name + ": carry")
          : MeasuredSteps::Carry::kMetric;
  const MeasuredSteps::Mode mode =
      j.contains("metric_mode")
          ? MeasuredSteps::ParseMode(j["metric_mode"].get<std::string>(), name + ": metric_mode")
          : MeasuredSteps::Mode::kAuto;
  for (const auto& run : runs) {  // what a job running at each batch measures
    const int b = run.first;
    const std::string& path = run.second;
    auto obs = Referenced(name + ": validation: \"" + std::to_string(b) + "\"",
                          [&] { return estimator::ReadValidationTrace(path, b); });
    std::sort(obs.begin(), obs.end(),
              [](const core::NoiseObservation& x, const core::NoiseObservation& y) {
                return x.progress < y.progress;
              });
    s.noise_by_batch[b] = std::move(obs);
  }
  s.measured = std::make_shared<MeasuredSteps>(
      Referenced(name + ": validation", [&] { return MeasuredSteps::Load(runs, carry, mode); }));
  if (s.base_batch != s.measured->min_batch())
    throw InputError(name + ": noise: base_batch " + std::to_string(s.base_batch) +
                     " must be the smallest validation batch (" +
                     std::to_string(s.measured->min_batch()) + ")");
  // target_metric is in the traces' units; a metric that falls is carried negated.
  const MeasuredSteps& m = *s.measured;
  s.target_metric =
      m.Carried(NumberField(j, "target_metric", m.Metric(m.CommonTarget()), name, false));
  if (s.target_metric > m.CommonTarget())
    throw InputError(name + ": target_metric: " + std::to_string(m.Metric(s.target_metric)) +
                     " is beyond what every measured run reaches (" +
                     std::to_string(m.Metric(m.CommonTarget())) +
                     (m.negated() ? "; a lower metric is better" : "") + ")");
  s.target_progress = s.ProgressAt(s.target_metric);
  // Only configurations whose global batch was measured around are offered.
  std::vector<Config> keep;
  std::vector<core::Measurement> kept;
  for (size_t i = 0; i < s.candidates.size(); ++i) {
    const double b = static_cast<double>(s.candidates[i].global_batch());
    if (b >= s.measured->min_batch() && b <= s.measured->max_batch()) {
      keep.push_back(s.candidates[i]);
      kept.push_back(s.traces[i]);
    }
  }
  s.candidates = std::move(keep);
  s.traces = std::move(kept);
  if (s.candidates.empty())
    throw InputError(name +
                     ": validation: no traced configuration has a global batch within "
                     "the measured batches");
  if (std::find(s.candidates.begin(), s.candidates.end(), s.start) == s.candidates.end())
    throw InputError(name + ": start: its global batch is outside the measured batches");
}

// "spot": real spot capacity traces and their reading.
void ParseSpot(const nlohmann::json& sp, const std::string& w, const std::string& base_dir,
               Scenario* out) {
  Scenario& s = *out;
  if (!sp.is_object() || !sp.contains("traces") || !sp["traces"].is_object())
    throw InputError(w +
                     ": expected {\"reading\": ..., \"traces\": {\"TYPE\": \"PATH\" or "
                     "{\"ZONE\": \"PATH\", ...}}}");
  s.spot_reading = ParseSpotReading(sp.value("reading", std::string("count")), w + ": reading");
  s.spot_offset_s = 3600 * NumberField(sp, "offset_h", s.spot_offset_s / 3600, w, false);
  for (auto it = sp["traces"].begin(); it != sp["traces"].end(); ++it) {
    if (s.catalog.Find(it.key()) < 0)
      throw InputError(w + ": traces: '" + it.key() + "' is not in the catalog");
    const std::string where = w + ": traces: " + it.key();
    auto load = [&](const std::string& at, const nlohmann::json& p) {
      if (!p.is_string()) throw InputError(at + ": expected a path");
      const std::string path = JoinPath(base_dir, p.get<std::string>());
      return Referenced(at, [&] { return SpotTrace::Load(path); });
    };
    if (!it.value().is_object()) {  // one zone
      s.spot.emplace(it.key(), SpotMarket(load(where, it.value())));
      continue;
    }
    if (it.value().empty())
      throw InputError(where + ": expected a path, or zones {\"ZONE\": \"PATH\", ...}");
    SpotMarket market;
    for (auto z = it.value().begin(); z != it.value().end(); ++z)
      market.AddZone(z.key(), load(where + ": " + z.key(), z.value()));
    s.spot.emplace(it.key(), std::move(market));
  }
}

Scenario ParseScenarioFields(const nlohmann::json& j, const std::string& name,
                             const std::string& base_dir) {
  if (!j.is_object()) throw InputError(name + ": not a JSON object");
  if (j.value("schema", std::string()) != "cloudtune.scenario/1")
    throw InputError(name + ": schema: expected \"cloudtune.scenario/1\"");
  Scenario s;
  s.name = j.value("name", name);
  s.catalog = DefaultCatalog();
  if (j.contains("gpu_extra"))  // GPU models the catalog does not know (rows of gpu_specs.csv)
    ForEachCsvRow(j["gpu_extra"], name + ": gpu_extra",
                  [&](std::istream& in, const std::string& w) {
                    for (auto& [model, spec] : ParseGpuSpecs(in, w)) s.catalog.gpus[model] = spec;
                  });
  if (j.contains("catalog_extra")) {  // instance types added to (or replacing) the catalog's
    ForEachCsvRow(j["catalog_extra"], name + ": catalog_extra",
                  [&](std::istream& in, const std::string& w) {
                    for (auto& t : ParseInstances(in, w, s.catalog.gpus, {}, &s.catalog.gpus)) {
                      const int i = s.catalog.Find(t.name);
                      if (i >= 0)
                        s.catalog.types[i] = t;
                      else
                        s.catalog.types.push_back(t);
                    }
                  });
    s.catalog.source += " + " + name + " catalog_extra";
  }
  if (!j.contains("traces") || !j["traces"].is_array() || j["traces"].empty())
    throw InputError(name + ": traces: missing or empty");
  for (size_t i = 0; i < j["traces"].size(); ++i) {
    const auto& tr = j["traces"][i];
    const std::string where = name + ": traces[" + std::to_string(i) + "]";
    if (!tr.contains("instance_type") || !tr["instance_type"].is_string())
      throw InputError(where + ": missing field 'instance_type'");
    const std::string type = tr["instance_type"].get<std::string>();
    const int ti = s.catalog.Find(type);
    if (ti < 0) throw InputError(where + ": instance_type: '" + type + "' is not in the catalog");
    std::vector<core::Measurement> ms;
    if (tr.contains("csv")) {
      std::vector<std::string> paths;
      for (auto& p : tr["csv"]) paths.push_back(JoinPath(base_dir, p.get<std::string>()));
      ms = Referenced(where + ": csv", [&] { return estimator::ReadTraces(paths); });
    } else if (tr.contains("gavel")) {
      ms = ReadGavel(tr["gavel"], where + ": gavel", base_dir, type);
    } else {
      throw InputError(where + ": needs 'csv' or 'gavel'");
    }
    for (auto& m : ms) {
      m.key.instance_type = type;
      const int n = m.key.num_nodes, r = m.key.num_replicas;
      if (r % n) continue;  // uneven placement
      const int gpn = r / n;
      if (m.max_gpus_per_node > gpn || gpn > s.catalog.types[ti].gpus) continue;
      Config c;
      c.type = type;
      c.nodes = n;
      c.gpus_per_node = gpn;
      c.local_bsz = m.key.local_bsz;
      c.accum_steps = m.key.accum_steps;
      s.candidates.push_back(c);
      s.traces.push_back(m);
    }
  }
  if (s.candidates.empty()) throw InputError(name + ": traces: no evenly placed configuration");
  if (!j.contains("noise") || !j["noise"].contains("validation_csv"))
    throw InputError(name + ": noise: missing field 'validation_csv'");
  s.base_batch = NumberField(j["noise"], "base_batch", 0, name + ": noise", true);
  if (s.base_batch <= 0) throw InputError(name + ": noise: missing field 'base_batch'");
  double max_progress = 0;
  const std::string noise_csv = JoinPath(base_dir, j["noise"]["validation_csv"].get<std::string>());
  s.noise = Referenced(name + ": noise: validation_csv", [&] {
    return estimator::ReadValidationTrace(noise_csv, s.base_batch, &max_progress);
  });
  std::sort(s.noise.begin(), s.noise.end(),
            [](const core::NoiseObservation& a, const core::NoiseObservation& b) {
              return a.progress < b.progress;
            });
  s.target_progress = NumberField(j, "target_progress", 0, name, false);
  if (s.target_progress == 0) s.target_progress = max_progress;  // the trace's last progress
  if (!j.contains("start") || !j["start"].is_object()) throw InputError(name + ": start: missing");
  const auto& st = j["start"];
  s.start.type = st.value("instance_type", std::string());
  s.start.nodes = IntField(st, "nodes", 1, name + ": start");
  s.start.gpus_per_node = IntField(st, "gpus_per_node", 1, name + ": start");
  s.start.local_bsz = IntField(st, "local_bsz", 1, name + ": start");
  s.start.accum_steps = IntField(st, "accum_steps", 0, name + ": start");
  const std::tuple<const char*, int, int> bounds[] = {{"nodes", s.start.nodes, 1},
                                                      {"gpus_per_node", s.start.gpus_per_node, 1},
                                                      {"local_bsz", s.start.local_bsz, 1},
                                                      {"accum_steps", s.start.accum_steps, 0}};
  for (const auto& [key, v, lo] : bounds)
    if (v < lo) throw InputError(name + ": start: " + key + ": must be >= " + std::to_string(lo));
  if (static_cast<long long>(s.start.nodes) * s.start.gpus_per_node >
      std::numeric_limits<int>::max())
    throw InputError(name + ": start: nodes x gpus_per_node: too many GPUs");
  if (std::find(s.candidates.begin(), s.candidates.end(), s.start) == s.candidates.end())
    throw InputError(name + ": start: " + s.start.ToString() + " is not a traced configuration");
  if (j.contains("objective")) {
    const auto& o = j["objective"];
    const std::string g = o.value("goal", std::string("cost"));
    if (!core::ParseGoal(g, &s.objective.goal))
      throw InputError(name + ": objective: goal: '" + g + "' (expected cost or time)");
    s.objective.deadline_h = NumberField(o, "deadline_h", 0, name + ": objective", false);
    s.objective.budget_usd = NumberField(o, "budget_usd", 0, name + ": objective", false);
  }
  if (j.contains("seeds")) {
    s.seeds.clear();
    for (auto& v : j["seeds"]) {
      if (!v.is_number_unsigned()) throw InputError(name + ": seeds: not a non-negative integer");
      s.seeds.push_back(v.get<uint64_t>());
    }
    if (s.seeds.empty()) throw InputError(name + ": seeds: empty");
  }
  s.step_noise_sigma = NumberField(j, "step_noise_sigma", s.step_noise_sigma, name, false);
  s.gradient_bytes = NumberField(j, "gradient_bytes", s.gradient_bytes, name, false);
  s.decision_interval_s = NumberField(j, "decision_interval_s", s.decision_interval_s, name, true);
  s.measure_s = NumberField(j, "measure_s", s.measure_s, name, true);
  if (j.contains("cost")) {
    const auto& c = j["cost"];
    const std::string w = name + ": cost";
    s.cost.restart_s = NumberField(c, "restart_s", s.cost.restart_s, w, false);
    s.cost.checkpoint_s = NumberField(c, "checkpoint_s", s.cost.checkpoint_s, w, true);
    s.cost.anchor_checkpoint_s =
        NumberField(c, "anchor_checkpoint_s", s.cost.anchor_checkpoint_s, w, true);
    s.cost.switch_s = NumberField(c, "switch_s", s.cost.switch_s, w, false);
    s.warning_s = NumberField(c, "warning_s", s.warning_s, w, false);
  }
  if (j.contains("validation"))
    ParseMeasuredTruth(j, name, base_dir, &s);
  else if (j.contains("carry") || j.contains("target_metric"))
    throw InputError(name + ": " + (j.contains("carry") ? "carry" : "target_metric") +
                     ": needs \"validation\" (the measured runs)");
  if (j.contains("spot")) ParseSpot(j["spot"], name + ": spot", base_dir, &s);
  s.IndexNoiseLogs();
  return s;
}

}  // namespace

namespace {
using NoiseLogs = std::vector<std::array<double, 2>>;

NoiseLogs LogsOf(const std::vector<core::NoiseObservation>& rows) {
  NoiseLogs logs(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int k = 0; k < 2; ++k) {
      const double v = k == 0 ? rows[i].grad_sqr : rows[i].grad_var;
      logs[i][k] = v > 0 ? std::log(v) : 0.0;
    }
  return logs;
}

// The rows NoiseAt reads (Scenario::NoiseRows) and their logarithms (null when not indexed).
std::pair<const std::vector<core::NoiseObservation>*, const NoiseLogs*> PickNoise(const Scenario& s,
                                                                                  double batch) {
  const std::vector<core::NoiseObservation>* rows = &s.noise;
  const NoiseLogs* logs = &s.noise_logs;
  int run = 0;
  if (batch > 0 && !s.noise_by_batch.empty()) {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& [b, obs] : s.noise_by_batch) {
      const double d = std::abs(std::log(batch / b));
      if (d < best && !obs.empty()) best = d, rows = &obs, run = b;
    }
    if (run) {
      const auto it = s.noise_logs_by_batch.find(run);
      logs = it == s.noise_logs_by_batch.end() ? nullptr : &it->second;
    }
  }
  if (logs && logs->size() != rows->size()) logs = nullptr;
  return {rows, logs};
}
}  // namespace

void Scenario::IndexNoiseLogs() {
  noise_logs = LogsOf(noise);
  noise_logs_by_batch.clear();
  for (const auto& [b, obs] : noise_by_batch) noise_logs_by_batch[b] = LogsOf(obs);
}

const std::vector<core::NoiseObservation>& Scenario::NoiseRows(double batch) const {
  return *PickNoise(*this, batch).first;
}

core::NoiseState Scenario::NoiseAt(double progress, double batch) const {
  const auto picked = PickNoise(*this, batch);  // (no structured binding: the lambda reads logs)
  const std::vector<core::NoiseObservation>& n = *picked.first;
  const NoiseLogs* logs = picked.second;
  core::NoiseState st;
  st.base_batch = base_batch;
  auto it =
      std::lower_bound(n.begin(), n.end(), progress,
                       [](const core::NoiseObservation& a, double p) { return a.progress < p; });
  if (it == n.begin()) {
    st.grad_sqr = n.front().grad_sqr;
    st.grad_var = n.front().grad_var;
  } else if (it == n.end()) {
    st.grad_sqr = n.back().grad_sqr;
    st.grad_var = n.back().grad_var;
  } else {
    const size_t i = static_cast<size_t>(it - n.begin());
    const core::NoiseObservation& a = n[i - 1];
    const core::NoiseObservation& b = n[i];
    const double w = (progress - a.progress) / std::max(1e-12, b.progress - a.progress);
    // Geometric between the rows: epoch averages that change by orders of magnitude (|G|^2 falls
    // 500-fold between bert's first two) are read as a steady rate of change, and the noise ratio
    // between the rows is then the same interpolation of the rows' ratios, whatever the scale of
    // |G|^2 (linear in each component, the ratio stays flat and jumps near the next row). Linear
    // where a row's value is not positive, which has no logarithm.
    auto mix = [&](int k, double x, double y) {
      if (!(x > 0 && y > 0)) return x + w * (y - x);
      const double lx = logs ? (*logs)[i - 1][k] : std::log(x);
      const double ly = logs ? (*logs)[i][k] : std::log(y);
      return std::exp(lx + w * (ly - lx));
    };
    st.grad_sqr = mix(0, a.grad_sqr, b.grad_sqr);
    st.grad_var = mix(1, a.grad_var, b.grad_var);
  }
  return st;
}

double Scenario::ProgressAt(double metric) const {
  return measured ? measured->StepsBetween(measured->min_batch(), measured->Origin(), metric) : 0.0;
}

Scenario ParseScenario(const nlohmann::json& j, const std::string& name,
                       const std::string& base_dir) {
  try {
    return ParseScenarioFields(j, name, base_dir);
  } catch (const nlohmann::json::exception& e) {
    // A member of the wrong JSON type (e.g. "schema": [] or "nodes": "two") is bad input too.
    throw InputError(name + ": " + e.what());
  }
}

Scenario LoadScenario(const std::string& path, const std::string& carry) {
  nlohmann::json j = core::ReadJsonFile(path);
  if (!carry.empty() && j.is_object() && j.contains("validation")) {
    MeasuredSteps::ParseCarry(carry, "--carry");
    const std::string own = j.value("carry", std::string("metric"));
    if (j.contains("target_metric") && own != carry)
      throw InputError(path + ": target_metric is a " + own +
                       " value; it cannot be read with carry " + carry);
    j["carry"] = carry;
  }
  const size_t slash = path.find_last_of('/');
  return ParseScenario(j, path, slash == std::string::npos ? "." : path.substr(0, slash));
}

}  // namespace cloudtune::replay
