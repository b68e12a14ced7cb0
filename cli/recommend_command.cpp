// cloudtune recommend: the job's own fit-and-search (runtime::Runtime::Decide) on a profile and
// a noise state given as files and flags, or on what a job recorded (--from SIDECAR|STATE).
#include <cmath>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/sidecar_reader.h"
#include "estimator/core/env.h"
#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "estimator/core/trace.h"
#include "plugin/runtime/runtime.h"
#include "search/recommend.h"

namespace cloudtune::cli {
namespace {

struct RecArgs {
  std::vector<std::string> profile;
  std::string gns, catalog, candidates, objective = "cost", format = "table", current, type, out;
  std::string clouds, gpus;
  std::string from;             // a sidecar or state file whose recorded inputs are the default
  std::set<std::string> given;  // the flags given on the command line
  double deadline = 0, budget = 0, target = 0, progress = 0, spent = 0, explored = 0;
  double gradient_bytes = 0;
  int max_nodes = 16, max_gpus = 64, max_local_bsz = 256, min_local_bsz = 8, max_accum = 3;
  bool pareto = false;
};

void NonNegative(double v, const char* flag) {
  if (!(v >= 0) || !std::isfinite(v)) {
    std::ostringstream m;
    m << flag << ": must be >= 0, got " << v;
    throw InputError(m.str());
  }
}

core::NoiseState CheckedNoise(double sqr, double var, double b0, const std::string& where,
                              const char* b0_name) {
  if (sqr < 0 || var < 0 || b0 <= 0)
    throw InputError(where + ": grad_sqr and grad_var must be >= 0 and " + b0_name + " > 0");
  core::NoiseState n;
  n.grad_sqr = sqr;
  n.grad_var = var;
  n.base_batch = b0;
  return n;
}

// --gns grad_sqr,grad_var,B0 or a JSON file (a noise state, or a fitted efficiency model).
void ParseGns(const std::string& arg, core::Snapshot* snap,
              std::optional<estimator::EfficiencyModel>* model) {
  if (arg.find(',') != std::string::npos) {
    std::vector<std::string> parts;
    std::stringstream ss(arg);
    std::string p;
    while (std::getline(ss, p, ',')) parts.push_back(p);
    if (parts.size() != 3)
      throw InputError("--gns: expected grad_sqr,grad_var,B0, got '" + arg + "'");
    snap->noise = CheckedNoise(ParseNumber(parts[0], "--gns grad_sqr"),
                               ParseNumber(parts[1], "--gns grad_var"),
                               ParseNumber(parts[2], "--gns B0"), "--gns", "B0");
    return;
  }
  const nlohmann::json j = core::ReadJsonFile(arg);
  if (!j.is_object()) throw InputError(arg + ": not a JSON object");
  if (j.contains("grad_sqr")) {
    for (const char* k : {"grad_sqr", "grad_var", "base_batch"})
      if (!j.contains(k) || !j[k].is_number())
        throw InputError(arg + ": " + k + ": missing or not a number");
    snap->noise = CheckedNoise(j["grad_sqr"].get<double>(), j["grad_var"].get<double>(),
                               j["base_batch"].get<double>(), arg, "base_batch");
  } else {
    *model = estimator::EfficiencyModel::FromJson(j, arg);
    snap->noise.base_batch = (*model)->base_batch();
  }
}

// --current TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]]
void ParseCurrent(const std::string& s, core::Snapshot* snap) {
  const search::Config c = ParseConfigArg(s, "--current");
  snap->current = c.Key();
  snap->gpus_per_node = c.gpus_per_node;
  snap->purchase = c.purchase;
}

void Validate(const RecArgs& a) {
  core::Goal goal;
  if (!core::ParseGoal(a.objective, &goal))
    throw InputError("--objective: '" + a.objective + "' (expected cost or time)");
  if (a.format != "json" && a.format != "table")
    throw InputError("--format: '" + a.format + "' (expected json or table)");
  NonNegative(a.deadline, "--deadline");
  NonNegative(a.budget, "--budget");
  NonNegative(a.progress, "--progress");
  NonNegative(a.spent, "--spent");
  NonNegative(a.explored, "--exploration-spent");
  NonNegative(a.gradient_bytes, "--gradient-bytes");
  for (const auto& [flag, v] : {std::pair{"--max-nodes", a.max_nodes}, {"--max-gpus", a.max_gpus}})
    if (v < 1) throw InputError(std::string(flag) + ": must be >= 1, got " + std::to_string(v));
  if (a.explored > a.spent) {
    std::ostringstream m;
    m << "--exploration-spent: " << a.explored << " exceeds --spent " << a.spent;
    throw InputError(m.str());
  }
  if (a.from.empty() && (!(a.target > 0) || !std::isfinite(a.target))) {
    std::ostringstream m;
    m << "--target-progress: must be > 0, got " << a.target;
    throw InputError(m.str());
  }
}

// The job the flags describe, as the runtime a live job would construct.
runtime::RuntimeSetup SetupFrom(const RecArgs& a,
                                const std::optional<estimator::EfficiencyModel>& model,
                                const std::string& default_type) {
  runtime::RuntimeSetup rs;
  rs.options.instance_type = default_type;  // of candidate rows without one
  rs.options.objective = a.objective;
  rs.options.deadline_hours = a.deadline;
  rs.options.budget_usd = a.budget;
  rs.options.target_progress = a.target;
  rs.options.max_local_batch = a.max_local_bsz;
  rs.options.candidates = a.candidates;
  rs.options.clouds = a.clouds;
  rs.options.max_nodes = a.max_nodes;
  rs.options.max_gpus = a.max_gpus;
  rs.options.gpus = a.gpus;
  rs.options.catalog =
      a.catalog.empty() ? core::GetEnv("CLOUDTUNE_CATALOG").value_or("") : a.catalog;
  rs.customize = [a, model](runtime::FitAndSearchOptions* fo) {
    fo->instance_type.clear();  // the profile rows and the current configuration say
    fo->recommend.space.min_local_bsz = a.min_local_bsz;
    fo->recommend.space.max_accum_steps = a.max_accum;
    fo->recommend.decide_again_s = 0;  // one decision: no later one corrects a kept overrun
    fo->efficiency_model = model;
  };
  return rs;
}

// Without --current: the profile's most-measured configuration, on demand.
void DefaultCurrent(const search::Catalog& catalog, core::Snapshot* snap) {
  const core::Measurement* most = &snap->profile[0];
  for (const auto& m : snap->profile)
    if (m.rows > most->rows) most = &m;
  snap->current = most->key;
  const int i = catalog.Find(most->key.instance_type);
  const int gpus = i >= 0 ? catalog.types[i].gpus : most->key.gpus_per_node();
  snap->gpus_per_node = most->max_gpus_per_node > 0 ? most->max_gpus_per_node
                                                    : std::min(gpus, most->key.gpus_per_node());
  snap->purchase = core::Purchase::kOnDemand;
}

// The (hours, cost) Pareto front of the same problem the runtime solved.
nlohmann::json Pareto(const runtime::Runtime& rt, const core::Snapshot& snap,
                      const runtime::TunerResult& res) {
  const search::Recommendation& r = res.decision;
  const runtime::FitAndSearchOptions& fo = rt.search_options();
  const search::RecommendRequest req = runtime::BuildRecommendRequest(snap, fo);
  search::ProfilePredictor pred(rt.catalog(), req.profile, req.options.measured_sigma,
                                req.throughput, req.gradient_bytes);
  const estimator::EfficiencyModel& eff = *res.efficiency;  // the one the runtime decided with
  const auto& o = req.options;
  search::SearchProblem p;
  p.catalog = &rt.catalog();
  p.predictor.step_time = [&](const search::InstanceType& t, const search::Config& c) {
    return pred.StepTime(t, c);
  };
  p.predictor.steps = [&](double b) {
    auto s = eff.StepsToProgress(b, o.current_progress, o.target_progress);
    return search::Estimate{s.steps, s.log_sigma};
  };
  p.space = o.space;
  p.objective = o.objective;
  p.cost = o.cost;
  p.remaining_progress = o.target_progress - o.current_progress;
  const search::Config cur = r.current.config;
  if (r.has_current) p.current = &cur;
  nlohmann::json front = nlohmann::json::array();
  for (const auto& e : search::ParetoFront(p)) {
    const double lo = std::exp(-e.log_sigma), hi = std::exp(e.log_sigma);
    front.push_back({{"description", e.config.ToString()},
                     {"hours", e.hours},
                     {"cost_usd", e.cost},
                     {"hours_range", {e.hours * lo, e.hours * hi}},
                     {"cost_range", {e.cost * lo, e.cost * hi}},
                     {"feasible", e.feasible}});
  }
  return front;
}

std::string Render(const RecArgs& a, const runtime::Runtime& rt, const core::Snapshot& snap,
                   const runtime::TunerResult& res) {
  if (a.format == "table") return res.decision.ToTable();
  nlohmann::json j = res.recommendation;
  if (a.pareto) j["pareto"] = Pareto(rt, snap, res);
  return j.dump(2) + "\n";
}

// --from: the job's own options (its start record) and inputs (its last recommendation with the
// efficiency model it decided with, or its state file), with the flags given on the command line
// on top.
std::string RunFrom(const RecArgs& a) {
  RecordedInputs rec =
      IsStateFile(a.from) ? InputsFromState(a.from) : InputsFromSidecar(ReadSidecar(a.from));
  for (const auto& w : rec.warnings) std::cerr << "cloudtune: warning: " << w << "\n";
  const auto given = [&](const char* flag) { return a.given.count(flag) > 0; };
  std::string err;
  runtime::RuntimeSetup rs;
  rs.options = runtime::Options::FromEnv(&err, [&rec](const char* name) -> const char* {
    const auto it = rec.options.find(name);
    return it == rec.options.end() ? nullptr : it->second.c_str();
  });
  if (!err.empty()) throw InputError(rec.where + ": options: " + err);
  runtime::Options& o = rs.options;
  if (given("--objective")) o.objective = a.objective;
  if (given("--deadline")) o.deadline_hours = a.deadline;
  if (given("--budget")) o.budget_usd = a.budget;
  if (given("--target-progress")) o.target_progress = a.target;
  if (given("--max-local-bsz")) o.max_local_batch = a.max_local_bsz;
  if (given("--candidates")) o.candidates = a.candidates;
  if (given("--clouds")) o.clouds = a.clouds;
  if (given("--max-nodes")) o.max_nodes = a.max_nodes;
  if (given("--max-gpus")) o.max_gpus = a.max_gpus;
  if (given("--gpus")) o.gpus = a.gpus;
  if (given("--catalog")) o.catalog = a.catalog;
  if (given("--instance-type")) o.instance_type = a.type;
  core::Goal goal;
  if (!core::ParseGoal(o.objective, &goal))
    throw InputError(rec.where + ": CLOUDTUNE_OBJECTIVE: '" + o.objective +
                     "' (expected cost or time)");
  if (!(o.target_progress > 0))
    throw InputError(rec.where + ": no target progress recorded (CLOUDTUNE_TARGET_PROGRESS): " +
                     "give --target-progress");
  // The job's own efficiency model, unless --gns gives another noise state.
  const std::optional<estimator::EfficiencyModel> recorded =
      given("--gns") ? std::nullopt : rec.efficiency;
  rs.customize = [a, given, recorded](runtime::FitAndSearchOptions* fo) {
    if (given("--min-local-bsz")) fo->recommend.space.min_local_bsz = a.min_local_bsz;
    if (given("--max-accum")) fo->recommend.space.max_accum_steps = a.max_accum;
    if (recorded) fo->efficiency_model = recorded;
  };
  core::Snapshot& snap = rec.snapshot;
  std::optional<estimator::EfficiencyModel> model;
  if (given("--profile")) snap.profile = estimator::ReadTraces(a.profile);
  if (given("--gns")) ParseGns(a.gns, &snap, &model);
  if (model) throw InputError("--gns: with --from, give grad_sqr,grad_var,B0 or a noise state");
  if (given("--current")) ParseCurrent(a.current, &snap);
  if (given("--progress")) snap.progress = a.progress;
  if (given("--gradient-bytes")) snap.gradient_bytes = a.gradient_bytes;
  for (auto& m : snap.profile)
    if (m.key.instance_type.empty()) m.key.instance_type = o.instance_type;
  if (snap.profile.empty()) throw InputError(rec.where + ": the recorded profile is empty");
  runtime::Runtime rt(rs);
  if (!rt.catalog_error().empty()) throw InputError(rt.catalog_error());
  const runtime::TunerResult res = rt.Decide(snap, "cli");
  return Render(a, rt, snap, res);
}

void RunRecommend(const RecArgs& a) {
  Validate(a);
  if (!a.from.empty()) return Output(a.out, RunFrom(a));
  if (a.profile.empty()) throw InputError("--profile: required (or give --from)");
  if (a.gns.empty()) throw InputError("--gns: required (or give --from)");
  core::Snapshot snap;
  std::optional<estimator::EfficiencyModel> model;
  snap.profile = estimator::ReadTraces(a.profile);
  ParseGns(a.gns, &snap, &model);
  if (!a.current.empty()) ParseCurrent(a.current, &snap);
  for (auto& m : snap.profile) {
    if (!m.key.instance_type.empty()) continue;
    if (!a.type.empty())
      m.key.instance_type = a.type;
    else if (!a.current.empty())
      m.key.instance_type = snap.current.instance_type;
    else
      throw InputError("profile: rows have no instance_type: give --instance-type or --current");
  }
  if (snap.profile.empty() && a.current.empty())
    throw InputError("profile: no configuration and no --current");
  snap.noise_valid = true;
  snap.progress = a.progress;
  snap.gradient_bytes = a.gradient_bytes;
  if (a.objective == "cost") {
    snap.cost_usd = a.spent;
    snap.exploration_usd = a.explored;
  } else {
    snap.elapsed_seconds = a.spent * 3600;
    snap.exploration_seconds = a.explored * 3600;
  }
  const std::string default_type = !a.type.empty()        ? a.type
                                   : !a.current.empty()   ? snap.current.instance_type
                                   : snap.profile.empty() ? std::string()
                                                          : snap.profile[0].key.instance_type;
  runtime::Runtime rt(SetupFrom(a, model, default_type));
  if (!rt.catalog_error().empty()) throw InputError(rt.catalog_error());
  if (!a.candidates.empty())  // a bad file is reported as it is, not as the tuner's state
    runtime::CandidatesFromTrace(a.candidates, default_type);
  runtime::AllowedTypes(rt.catalog(), a.clouds, a.gpus, "--clouds", "--gpus");  // named by flag
  if (a.current.empty()) DefaultCurrent(rt.catalog(), &snap);
  const runtime::TunerResult res = rt.Decide(snap, "cli");
  Output(a.out, Render(a, rt, snap, res));
}

}  // namespace

nlohmann::json RecommendFromRecorded(const std::string& path) {
  RecArgs a;
  a.from = path;
  a.format = "json";
  a.pareto = true;
  return nlohmann::json::parse(RunFrom(a));
}

void RegisterRecommendCommand(CLI::App& app) {
  auto* rec = app.add_subcommand(
      "recommend", "Recommend a configuration from a measured profile (JSON or a table)");
  auto ra = std::make_shared<RecArgs>();
  rec->add_option("--from", ra->from,
                  "A job's sidecar or state file: its recorded options, profile, noise (a "
                  "sidecar: the efficiency model it decided with), current configuration and "
                  "progress are the defaults; the flags below override them");
  rec->add_option("--profile", ra->profile, "Measured profile trace CSV(s)");
  rec->add_option("--gns", ra->gns,
                  "Gradient noise: grad_sqr,grad_var,B0 or a JSON file (noise state or "
                  "efficiency model)");
  rec->add_option("--catalog", ra->catalog,
                  "Catalog CSV replacing the embedded one (prefix '+' to extend it); default "
                  "$CLOUDTUNE_CATALOG");
  rec->add_option("--candidates", ra->candidates,
                  "Trace CSV of the only configurations to propose (default: the whole space; "
                  "as CLOUDTUNE_CANDIDATES)");
  rec->add_option("--clouds", ra->clouds,
                  "Comma-separated clouds to propose types of, e.g. aws (default: every cloud)");
  rec->add_option("--gpus", ra->gpus,
                  "Comma-separated GPU models to propose, e.g. T4,A10G (default: every GPU)");
  rec->add_option("--objective", ra->objective, "cost or time (default cost)");
  rec->add_option("--deadline", ra->deadline, "Deadline in hours (0 = none)");
  rec->add_option("--budget", ra->budget, "Budget in USD (0 = none)");
  rec->add_option("--target-progress", ra->target, "Target progress (B0-steps)");
  rec->add_option("--progress", ra->progress, "Progress made so far (B0-steps, default 0)");
  rec->add_option("--gradient-bytes", ra->gradient_bytes,
                  "Bytes a step all-reduces (the model's gradients, as the plugin records them; "
                  "default 0 = unknown): carries the network measured on one type to the others");
  rec->add_option("--spent", ra->spent,
                  "Spent so far in objective units (USD for cost, hours for time; default 0)");
  rec->add_option("--exploration-spent", ra->explored,
                  "Of --spent, the part spent on measurements (caps further exploration at 4% of "
                  "the expected total; default 0)");
  rec->add_option("--current", ra->current,
                  "Current configuration TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]] "
                  "(default: the profile's most-measured configuration, on demand)");
  rec->add_option("--instance-type", ra->type,
                  "Instance type of profile rows that have no instance_type column");
  rec->add_option("--max-nodes", ra->max_nodes, "Most instances (default 16)");
  rec->add_option("--max-gpus", ra->max_gpus, "Most GPUs over all instances (default 64)");
  rec->add_option("--min-local-bsz", ra->min_local_bsz, "Smallest per-GPU batch (default 8)");
  rec->add_option("--max-local-bsz", ra->max_local_bsz, "Largest per-GPU batch (default 256)");
  rec->add_option("--max-accum", ra->max_accum, "Most accumulation micro-steps (default 3)");
  rec->add_flag("--pareto", ra->pareto, "Add the (time, cost) Pareto front to the JSON");
  rec->add_option("--format", ra->format, "table or json (default table)");
  rec->add_option("-o,--output", ra->out, "Write to this file instead of stdout");
  // Validated in RunRecommend (not by CLI11) so that every bad value gets
  // "cloudtune: error: ..." and exit 1.
  rec->callback([ra, rec]() {
    for (const CLI::Option* o : rec->get_options())
      if (o->count() > 0) ra->given.insert(o->get_name());
    RunRecommend(*ra);
  });
}

}  // namespace cloudtune::cli
