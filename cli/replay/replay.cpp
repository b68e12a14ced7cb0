#include "cli/replay/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>

#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "cli/replay/oracle.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune::replay {

namespace {

constexpr double kLimitHours = 20000;  // a policy that has not finished by then is cut off

std::string JoinPath(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || dir.empty()) return p;
  return dir + "/" + p;
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
  const nlohmann::json data = core::ReadJsonFile(path);
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
std::vector<InstanceType> ParseExtraRows(const nlohmann::json& rows, const std::string& where,
                                         const Catalog& base) {
  std::vector<InstanceType> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (!r.is_object()) throw InputError(where + "[" + std::to_string(i) + "]: not an object");
    std::string header, values;
    for (auto& [k, v] : r.items()) {
      if (k == "note") continue;
      header += (header.empty() ? "" : ",") + k;
      std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      values += (values.empty() ? "" : ",") + s;
    }
    std::istringstream in(header + "\n" + values + "\n");
    auto t = ParseInstances(in, where + "[" + std::to_string(i) + "]", base.gpus);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
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

// ---- simulation -------------------------------------------------------------------------------

struct Observation {
  double sum = 0;
  int n = 0;
  double sync = 0;
};

struct Decision {
  Config config;
  bool measure = false;
};

class Simulator {
 public:
  Simulator(const Scenario& s, uint64_t seed, const std::string& policy)
      : s_(s),
        rng_(seed * 1000003ULL + std::hash<std::string>()(policy)),
        revocation_rng_(seed * 7919ULL + 17),
        spot_offset_s_(static_cast<double>(seed) * s.spot_offset_s) {
    next_revocation_ = std::exponential_distribution<double>(1.0)(revocation_rng_);
    for (const auto& m : s.traces) truth_[m.key] = &m;
    if (s.measured) metric_ = last_ckpt_metric_ = s.measured->StartMetric();
  }

  // Spot nodes of `type` the trace says can be had now (a large number where there is no trace).
  int SpotAvailable(const std::string& type) const {
    auto it = s_.spot.find(type);
    if (it == s_.spot.end()) return 1 << 20;
    return it->second.Available(t_h_ * 3600, 1 << 20, s_.spot_reading, spot_offset_s_);
  }
  double metric() const { return metric_; }

  const core::Measurement* Truth(const Config& c) const {
    auto it = truth_.find(c.Key());
    return it == truth_.end() ? nullptr : it->second;
  }

  core::NoiseState NoiseAt(double progress) const { return s_.NoiseAt(progress); }

  // Runs `policy` to the target.
  PolicyResult Run(
      const std::string& name,
      const std::function<Decision(Simulator&, const Config& cur, bool first)>& policy) {
    PolicyResult r;
    r.policy = name;
    // Every adaptive policy starts where the user launched the job (cloudtune lives inside it):
    // the first window runs the start configuration; it is not counted as exploration.
    Decision d = policy(*this, s_.start, true);
    cur_ = d.config;
    bool measuring = d.measure, first = true;
    while (progress_ < s_.target_progress && t_h_ < kLimitHours) {
      const double window = measuring ? s_.measure_s : s_.decision_interval_s;
      const double c0 = cost_;
      RunWindow(cur_, window, &r);
      if (measuring && !first) {
        r.exploration_cost += cost_ - c0;
        explore_h_ += window / 3600.0;
        ++r.measurements;
      }
      explore_cost_ = r.exploration_cost;
      first = false;
      if (progress_ >= s_.target_progress) break;
      Decision next = policy(*this, cur_, false);
      if (!(next.config == cur_)) {
        const InstanceType& t = Type(next.config);
        const double sw =
            next.config.SameHardware(cur_) ? s_.cost.batch_switch_s : s_.cost.switch_s;
        const double c1 = cost_;
        Advance(sw / 3600.0, HourlyPrice(t, next.config.nodes, next.config.purchase));
        if (next.measure) {
          r.exploration_cost += cost_ - c1;
          explore_h_ += sw / 3600.0;
        }
        explore_cost_ = r.exploration_cost;
        ++r.switches;
        last_ckpt_progress_ = progress_;  // a switch checkpoints
        last_ckpt_metric_ = metric_;
        since_ckpt_s_ = 0;
        cur_ = next.config;
        running_ = waiting_ = false;
      }
      measuring = next.measure;
    }
    r.cost = cost_;
    r.makespan_h = t_h_;
    r.finished = progress_ >= s_.target_progress;
    const ObjectiveOptions& o = s_.objective;
    r.deadline_met = o.deadline_h <= 0 || (r.finished && r.makespan_h <= o.deadline_h);
    r.budget_met = o.budget_usd <= 0 || (r.finished && r.cost <= o.budget_usd);
    return r;
  }

  double progress() const { return progress_; }
  // Spent so far (USD, hours) and the part spent measuring.
  double cost() const { return cost_; }
  double hours() const { return t_h_; }
  double exploration_cost() const { return explore_cost_; }
  double exploration_hours() const { return explore_h_; }
  std::map<core::ConfigKey, Observation>& observations() { return obs_; }

  const InstanceType& Type(const Config& c) const {
    return s_.catalog.types[s_.catalog.Find(c.type)];
  }

 private:
  void Advance(double hours, double price) {
    t_h_ += hours;
    cost_ += hours * price;
  }

  void RunWindow(const Config& c, double window_s, PolicyResult* r) {
    const core::Measurement* m = Truth(c);
    if (!m) throw InputError("replay: policy chose an untraced configuration " + c.ToString());
    const InstanceType& t = Type(c);
    const double price = HourlyPrice(t, c.nodes, c.purchase);
    const double hazard_rate = ClusterRevocationRate(t, c.nodes, c.purchase);
    const double ckpt =
        c.purchase == Purchase::kAnchor ? s_.cost.anchor_checkpoint_s : s_.cost.checkpoint_s;
    // Checkpoints at the Young/Daly interval of the catalog's rate (what the job can know).
    const double tau_s = YoungDalyInterval(ckpt, hazard_rate);
    const double batch = static_cast<double>(c.global_batch());
    // Real spot capacity: the spot nodes this configuration holds, and what it pays while it
    // waits for them (its on-demand anchor).
    const SpotTrace* trace = nullptr;
    int spot_nodes = 0;
    if (c.purchase != Purchase::kOnDemand) {
      auto it = s_.spot.find(c.type);
      if (it != s_.spot.end()) {
        trace = &it->second;
        spot_nodes = c.purchase == Purchase::kSpot ? c.nodes : c.nodes - 1;
      }
    }
    const double rate = trace ? 0.0 : hazard_rate;  // revocations come from the trace
    const double waiting_price =
        c.purchase == Purchase::kAnchor ? HourlyPrice(t, 1, Purchase::kOnDemand) : 0.0;
    // Time since the last checkpoint carries over from window to window (checkpoints follow the
    // Young/Daly interval of the running configuration, not the decision windows).
    double left = window_s;
    double& since_ckpt = since_ckpt_s_;
    while (left > 1e-9 && progress_ < s_.target_progress) {
      const double chunk = std::min(60.0, left);
      if (trace && spot_nodes > 0) {
        if (trace->Available(t_h_ * 3600, spot_nodes, s_.spot_reading, spot_offset_s_) <
            spot_nodes) {
          if (running_ && !waiting_) {  // the capacity it holds is gone: a revocation
            ++r->revocations;
            progress_ = last_ckpt_progress_;
            metric_ = last_ckpt_metric_;
            since_ckpt = 0;
          }
          waiting_ = true;
          Advance(chunk / 3600.0, waiting_price);
          r->waited_h += chunk / 3600.0;
          left -= chunk;
          continue;
        }
        if (waiting_ && running_) Advance(s_.cost.restart_s / 3600.0, price);  // back: restart
        waiting_ = false;
      }
      running_ = true;
      double dp, metric = metric_;
      if (s_.measured) {  // measured truth: the metric the runs reach in these steps
        metric = s_.measured->MetricAfter(batch, metric_, chunk / m->step_time);
        dp = s_.ProgressAt(metric) - progress_;
      } else {
        dp = chunk / m->step_time * estimator::Gain(NoiseAt(progress_), batch);
      }
      if (progress_ + dp >= s_.target_progress) {  // finishes inside this chunk
        double frac = dp > 0 ? (s_.target_progress - progress_) / dp : 1.0;
        if (s_.measured)  // exactly the steps the measured run at this batch needs
          frac = std::min(
              1.0, s_.measured->StepsBetween(batch, metric_, std::max(metric_, s_.target_metric)) *
                       m->step_time / chunk);
        Advance(frac * chunk / 3600.0, price);
        progress_ = s_.target_progress;
        metric_ = std::max(metric_, s_.target_metric);
        break;
      }
      progress_ += dp;
      metric_ = metric;
      Advance(chunk / 3600.0, price);
      left -= chunk;
      since_ckpt += chunk;
      if (since_ckpt >= tau_s) {
        Advance(ckpt / 3600.0, price);
        last_ckpt_progress_ = progress_;
        last_ckpt_metric_ = metric_;
        since_ckpt = 0;
      }
      // Revocations by inverse-hazard sampling: a revocation happens when the cumulative hazard
      // (rate × time) crosses the next Exp(1) threshold. The thresholds come from a stream that
      // depends on the seed only, so every policy faces the same revocation luck (common random
      // numbers); a riskier configuration crosses the thresholds sooner.
      hazard_ += rate * chunk / 3600.0;
      if (hazard_ >= next_revocation_) {
        ++r->revocations;
        progress_ = last_ckpt_progress_;
        metric_ = last_ckpt_metric_;
        Advance(s_.cost.restart_s / 3600.0, price);
        since_ckpt = 0;
        hazard_ = 0;
        next_revocation_ = std::exponential_distribution<double>(1.0)(revocation_rng_);
      }
    }
    // What the hooks measured during the window: the mean step time with log-normal noise.
    std::normal_distribution<double> z(0.0, 1.0);
    const double noise = std::exp(s_.step_noise_sigma * z(rng_));
    Observation& o = obs_[c.Key()];
    o.sum += m->step_time * noise;
    o.sync = m->sync_time * noise;
    ++o.n;
  }

  const Scenario& s_;
  std::mt19937_64 rng_;             // measurement noise (per policy)
  std::mt19937_64 revocation_rng_;  // revocation thresholds (the same for every policy)
  double hazard_ = 0, next_revocation_ = 0;
  std::map<core::ConfigKey, const core::Measurement*> truth_;
  std::map<core::ConfigKey, Observation> obs_;
  Config cur_;
  double progress_ = 0, last_ckpt_progress_ = 0, t_h_ = 0, cost_ = 0;
  double explore_cost_ = 0, explore_h_ = 0;
  double since_ckpt_s_ = 0;                   // training seconds since the last checkpoint
  double spot_offset_s_ = 0;                  // where this seed starts in the spot traces
  double metric_ = 0, last_ckpt_metric_ = 0;  // measured truth: best validation metric reached
  bool running_ = false;  // the current configuration has run (a later loss is a revocation)
  bool waiting_ = false;  // waiting for spot capacity
};

// A predictor that knows every trace (for the oracle and trace-informed baselines).
Predictor TruePredictor(const Simulator& sim, const Scenario& s, double progress) {
  Predictor p;
  p.step_time = [&sim](const InstanceType&, const Config& c) {
    const core::Measurement* m = sim.Truth(c);
    return Estimate{m ? m->step_time : 0.0, 0.0};
  };
  if (s.measured) {
    const double from = sim.metric(), to = s.target_metric;
    const MeasuredSteps* truth = s.measured.get();
    p.steps = [truth, from, to](double b) {
      return Estimate{truth->StepsBetween(b, from, std::max(from, to)), 0.0};
    };
    return p;
  }
  auto eff = std::make_shared<estimator::EfficiencyModel>(
      estimator::EfficiencyModel::FromNoise(sim.NoiseAt(progress)));
  const double to = s.target_progress;
  p.steps = [eff, progress, to](double b) {
    auto sp = eff->StepsToProgress(b, progress, to);
    return Estimate{sp.steps, 0.0};
  };
  return p;
}

RecommendOptions BaseOptions(const Scenario& s, double progress) {
  RecommendOptions o;
  o.objective = s.objective;
  o.cost = s.cost;
  o.target_progress = s.target_progress;
  o.current_progress = progress;
  o.measure_s = s.measure_s;
  return o;
}

// Decide() with full knowledge of the traces, restricted to `candidates`.
Decision Informed(Simulator& sim, const Scenario& s, const Config& cur,
                  const std::vector<Config>& candidates, ObjectiveOptions objective,
                  const SpaceOptions& space) {
  SearchProblem p;
  p.catalog = &s.catalog;
  p.predictor = TruePredictor(sim, s, sim.progress());
  p.objective = objective;
  p.cost = s.cost;
  p.space = space;
  p.remaining_progress = s.target_progress - sim.progress();
  p.current = &cur;
  p.candidates = candidates;
  for (const auto& [type, trace] : s.spot)
    p.space.spot_nodes_available[type] = sim.SpotAvailable(type);
  RecommendOptions o = BaseOptions(s, sim.progress());
  o.objective = objective;
  Recommendation r = Decide(p, o, [](const Config&) { return true; });
  return {r.proposed.config, false};
}

// The traced configuration of `type` closest to `want` (most replicas, then nearest local batch).
Config Pick(const Scenario& s, const std::string& type, int want_bsz,
            const std::function<double(const Config&)>& score) {
  const Config* best = nullptr;
  double best_score = 0;
  for (const Config& c : s.candidates) {
    if (c.type != type) continue;
    const double sc = score(c) - 1e-6 * std::abs(std::log(double(c.local_bsz) / want_bsz));
    if (!best || sc > best_score) {
      best = &c;
      best_score = sc;
    }
  }
  return *best;
}

}  // namespace

namespace {

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
  s.measured = std::make_shared<MeasuredSteps>(MeasuredSteps::Load(runs));
  if (s.base_batch != s.measured->min_batch())
    throw InputError(name + ": noise: base_batch " + std::to_string(s.base_batch) +
                     " must be the smallest validation batch (" +
                     std::to_string(s.measured->min_batch()) + ")");
  s.target_metric = NumberField(j, "target_metric", s.measured->CommonTarget(), name, false);
  if (s.target_metric > s.measured->CommonTarget())
    throw InputError(name + ": target_metric: " + std::to_string(s.target_metric) +
                     " is beyond what every measured run reaches (" +
                     std::to_string(s.measured->CommonTarget()) + ")");
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
    throw InputError(w + ": expected {\"reading\": ..., \"traces\": {\"TYPE\": \"PATH\"}}");
  s.spot_reading = ParseSpotReading(sp.value("reading", std::string("count")), w + ": reading");
  s.spot_offset_s = 3600 * NumberField(sp, "offset_h", s.spot_offset_s / 3600, w, false);
  for (auto it = sp["traces"].begin(); it != sp["traces"].end(); ++it) {
    if (s.catalog.Find(it.key()) < 0)
      throw InputError(w + ": traces: '" + it.key() + "' is not in the catalog");
    if (!it.value().is_string())
      throw InputError(w + ": traces: " + it.key() + ": expected a path");
    s.spot.emplace(it.key(), SpotTrace::Load(JoinPath(base_dir, it.value().get<std::string>())));
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
  if (j.contains("catalog_extra")) {
    if (!j["catalog_extra"].is_array()) throw InputError(name + ": catalog_extra: not an array");
    for (auto& t : ParseExtraRows(j["catalog_extra"], name + ": catalog_extra", s.catalog)) {
      int i = s.catalog.Find(t.name);
      if (i >= 0)
        s.catalog.types[i] = t;
      else
        s.catalog.types.push_back(t);
    }
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
      ms = estimator::ReadTraces(paths);
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
  s.noise = estimator::ReadValidationTrace(
      JoinPath(base_dir, j["noise"]["validation_csv"].get<std::string>()), s.base_batch,
      &max_progress);
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
  }
  if (j.contains("validation")) ParseMeasuredTruth(j, name, base_dir, &s);
  if (j.contains("spot")) ParseSpot(j["spot"], name + ": spot", base_dir, &s);
  return s;
}

}  // namespace

core::NoiseState Scenario::NoiseAt(double progress) const {
  const auto& n = noise;
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
    const core::NoiseObservation& a = *(it - 1);
    const core::NoiseObservation& b = *it;
    const double w = (progress - a.progress) / std::max(1e-12, b.progress - a.progress);
    st.grad_sqr = a.grad_sqr + w * (b.grad_sqr - a.grad_sqr);
    st.grad_var = a.grad_var + w * (b.grad_var - a.grad_var);
  }
  return st;
}

double Scenario::ProgressAt(double metric) const {
  return measured ? measured->StepsBetween(measured->min_batch(), 0.0, metric) : 0.0;
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

// The runtime options of the scenario's job: its objective and target; the search is restricted to
// the traced configurations (the truth exists only for those), priced with the scenario's catalog.
runtime::RuntimeSetup CloudtuneSetup(const Scenario& s) {
  runtime::RuntimeSetup rs;
  rs.options.objective = core::GoalName(s.objective.goal);
  rs.options.deadline_hours = s.objective.deadline_h;
  rs.options.budget_usd = s.objective.budget_usd;
  rs.options.target_progress = s.target_progress;
  rs.customize = [&s](runtime::FitAndSearchOptions* fo) {
    fo->catalog = &s.catalog;
    fo->instance_type.clear();  // the snapshot's current configuration says
    fo->recommend.cost = s.cost;
    fo->recommend.measure_s = s.measure_s;
    fo->candidates = s.candidates;
  };
  return rs;
}

search::Recommendation CloudtuneDecide(const runtime::Runtime& rt, const JobView& job) {
  core::Snapshot snap;
  snap.profile = job.measured;
  snap.noise = job.noise;
  snap.noise_valid = true;
  snap.current = job.current.Key();
  snap.gpus_per_node = job.current.gpus_per_node;
  snap.purchase = job.current.purchase;
  snap.progress = job.progress;
  snap.elapsed_seconds = job.hours * 3600;
  snap.cost_usd = job.cost_usd;
  snap.exploration_usd = job.exploration_usd;
  snap.exploration_seconds = job.exploration_hours * 3600;
  snap.spot_nodes_available = job.spot_nodes_available;
  return rt.Decide(snap, "timer").decision;
}

Scenario LoadScenario(const std::string& path) {
  const nlohmann::json j = core::ReadJsonFile(path);
  const size_t slash = path.find_last_of('/');
  return ParseScenario(j, path, slash == std::string::npos ? "." : path.substr(0, slash));
}

std::vector<PolicyResult> RunReplay(const Scenario& s, uint64_t seed, const Oracle* oracle) {
  std::vector<PolicyResult> out;
  SpaceOptions all;
  auto run = [&](const std::string& name,
                 const std::function<Decision(Simulator&, const Config&, bool)>& policy) {
    Simulator sim(s, seed, name);
    out.push_back(sim.Run(name, policy));
  };

  // cloudtune: the runtime a live job runs, fed only its own noisy measurements; it starts by
  // measuring the start configuration.
  auto tuner = std::make_shared<runtime::Runtime>(CloudtuneSetup(s));
  run("cloudtune", [&, tuner](Simulator& sim, const Config& cur, bool first) -> Decision {
    if (first) return {s.start, true};
    JobView job;
    for (auto& [key, o] : sim.observations()) {
      core::Measurement m;
      m.key = key;
      m.step_time = o.sum / o.n;
      m.sync_time = std::min(o.sync, 0.95 * m.step_time);
      m.rows = o.n;
      job.measured.push_back(m);
    }
    job.noise = sim.NoiseAt(sim.progress());
    job.current = cur;
    job.progress = sim.progress();
    job.hours = sim.hours();
    job.cost_usd = sim.cost();
    job.exploration_hours = sim.exploration_hours();
    job.exploration_usd = sim.exploration_cost();
    for (const auto& [type, trace] : s.spot)
      job.spot_nodes_available[type] = sim.SpotAvailable(type);
    const search::Recommendation r = CloudtuneDecide(*tuner, job);
    return {r.proposed.config, r.action == Recommendation::Action::kMeasure};
  });
  run("fixed-on-demand", [&](Simulator&, const Config&, bool) -> Decision {
    return {s.start, false};
  });
  {  // the start configuration on spot, waiting out and restarting after revocations
    Config c = s.start;
    const InstanceType& t = s.catalog.types[s.catalog.Find(c.type)];
    c.purchase = t.has_spot() ? Purchase::kSpot : Purchase::kOnDemand;
    run("fixed-spot", [c](Simulator&, const Config&, bool) -> Decision { return {c, false}; });
    // Managed spot: on demand while the spot capacity is gone (seen at a decision).
    run("managed-spot", [c, &s](Simulator& sim, const Config&, bool first) -> Decision {
      if (first || sim.SpotAvailable(c.type) >= c.nodes) return {c, false};
      return {s.start, false};
    });
    if (s.objective.deadline_h > 0) {
      // Uniform Progress: its speed is what it has measured (progress per hour of its last window
      // that made progress; the start configuration runs at one speed on spot and on demand).
      struct State {
        double progress = 0, hours = 0, rate = 0;
      };
      auto st = std::make_shared<State>();
      const double deadline = s.objective.deadline_h, target = s.target_progress;
      const double restart_h = (s.cost.switch_s + s.cost.restart_s) / 3600;
      const double window_h = s.decision_interval_s / 3600;
      run("uniform-progress", [c, &s, st, deadline, target, restart_h, window_h](
                                  Simulator& sim, const Config&, bool first) -> Decision {
        if (first) return {s.start, false};  // the first window measures its speed on demand
        if (sim.progress() > st->progress && sim.hours() > st->hours)
          st->rate = (sim.progress() - st->progress) / (sim.hours() - st->hours);
        st->progress = sim.progress();
        st->hours = sim.hours();
        const double left_h = deadline - sim.hours();
        const double work_h = st->rate > 0 ? (target - sim.progress()) / st->rate : left_h;
        // Safety net: switch to on demand for good when one more window's gamble plus a restart
        // would leave too little time for the work on demand.
        if (left_h <= work_h + window_h + restart_h) return {s.start, false};
        if (sim.progress() >= target * sim.hours() / deadline)
          return {c, false};  // ahead (or on the line): spot, waiting when there is none
        return {s.start, false};
      });
    }
  }
  // Types that have traces.
  std::vector<std::string> types;
  for (const Config& c : s.candidates)
    if (std::find(types.begin(), types.end(), c.type) == types.end()) types.push_back(c.type);
  auto type_of = [&](const std::string& n) -> const InstanceType& {
    return s.catalog.types[s.catalog.Find(n)];
  };
  auto most_gpus = [](const Config& c) { return double(c.replicas()); };
  {  // cheapest spot per GPU, most nodes
    std::string best;
    double bp = 0;
    for (auto& t : types) {
      const auto& it = type_of(t);
      const double p = HourlyPrice(it, 1, Purchase::kSpot) / it.gpus;
      if (best.empty() || p < bp) best = t, bp = p;
    }
    Config c = Pick(s, best, s.start.local_bsz,
                    [](const Config& c) { return c.nodes * 1000.0 + c.gpus_per_node; });
    c.purchase = type_of(best).has_spot() ? Purchase::kSpot : Purchase::kOnDemand;
    run("cheapest-spot", [c, &s](Simulator&, const Config&, bool first) -> Decision {
      return first ? Decision{s.start, true} : Decision{c, false};
    });
  }
  {  // fastest first: highest per-GPU TFLOPS, most GPUs, on demand
    std::string best;
    double bf = -1;
    for (auto& t : types) {
      const auto& it = type_of(t);
      const double f = InstanceTflops(s.catalog, it) / it.gpus;
      if (f > bf) best = t, bf = f;
    }
    Config c = Pick(s, best, s.start.local_bsz, most_gpus);
    run("fastest-first", [c, &s](Simulator&, const Config&, bool first) -> Decision {
      return first ? Decision{s.start, true} : Decision{c, false};
    });
  }
  {  // DeepVM: highest FLOPP type (spot price), its profiled config with the best samples/s per
     // USD/h, anchor + spot workers when multi-node.
    std::string best;
    double bf = -1;
    for (auto& t : types) {
      const double f = Flopp(s.catalog, type_of(t), Purchase::kSpot);
      if (f > bf) best = t, bf = f;
    }
    Simulator probe(s, seed, "deepvm-probe");
    const InstanceType& it = type_of(best);
    Config c = Pick(s, best, s.start.local_bsz, [&](const Config& c) {
      const auto* m = probe.Truth(c);
      const Purchase pu = c.nodes > 1 ? Purchase::kAnchor : Purchase::kSpot;
      return m ? c.global_batch() / m->step_time / HourlyPrice(it, c.nodes, pu) : 0.0;
    });
    c.purchase =
        !it.has_spot() ? Purchase::kOnDemand : (c.nodes > 1 ? Purchase::kAnchor : Purchase::kSpot);
    run("deepvm-flopp", [c, &s](Simulator&, const Config&, bool first) -> Decision {
      return first ? Decision{s.start, true} : Decision{c, false};
    });
  }
  {  // Pollux: maximise goodput (fastest to target) on the start type, on demand, price-blind.
    std::vector<Config> same;
    for (const Config& c : s.candidates)
      if (c.type == s.start.type) same.push_back(c);
    SpaceOptions od;
    od.allow_spot = od.allow_anchor = false;
    ObjectiveOptions time;
    time.goal = Goal::kTime;
    run("pollux-goodput", [&, same, od, time](Simulator& sim, const Config& cur, bool first) {
      if (first) return Decision{s.start, true};
      return Informed(sim, s, cur, same, time, od);
    });
  }
  // A perfect model deciding online (greedy in time, not in hindsight).
  run("informed-greedy", [&](Simulator& sim, const Config& cur, bool first) -> Decision {
    if (first) return {s.start, true};
    return Informed(sim, s, cur, s.candidates, s.objective, all);
  });
  {  // the hindsight optimum, given at least the time the slowest policy took
    double horizon_h = 0;
    for (const PolicyResult& r : out)
      if (r.finished) horizon_h = std::max(horizon_h, r.makespan_h);
    OracleOptions oo;
    oo.horizon_h = std::max(horizon_h, s.decision_interval_s / 3600);
    std::unique_ptr<Oracle> own;
    if (!oracle) own = std::make_unique<Oracle>(s, oo);
    const OracleResult o = oracle ? oracle->Solve(seed, oo.horizon_h) : own->Solve(seed);
    PolicyResult r;
    r.policy = "oracle";
    r.finished = o.finished;
    r.cost = o.cost;
    r.cost_lower = o.cost_lower;
    r.switches = o.switches;
    r.schedule = o.schedule;
    r.makespan_h = o.makespan_h;
    const ObjectiveOptions& ob = s.objective;
    r.deadline_met = ob.deadline_h <= 0 || (r.finished && r.makespan_h <= ob.deadline_h);
    r.budget_met = ob.budget_usd <= 0 || (r.finished && r.cost <= ob.budget_usd);
    PolicyResult f;
    f.policy = "hindsight-fixed";
    f.finished = o.fixed_cost > 0;
    f.cost = o.fixed_cost;
    f.makespan_h = o.fixed_makespan_h;
    f.switches = f.finished ? 1 : 0;
    if (f.finished) f.schedule = {"0.00 h: " + o.fixed_config};
    f.deadline_met = ob.deadline_h <= 0 || (f.finished && f.makespan_h <= ob.deadline_h);
    f.budget_met = ob.budget_usd <= 0 || (f.finished && f.cost <= ob.budget_usd);
    out.insert(out.begin() + 1, r);
    out.insert(out.begin() + 2, f);
  }
  return out;
}

}  // namespace cloudtune::replay
