#include "plugin/runtime/fit_and_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "estimator/core/error.h"
#include "estimator/core/trace.h"
#include "plugin/runtime/preemption.h"

namespace cloudtune::runtime {
namespace {

std::string Fixed(double v, int digits) {
  if (!std::isfinite(v)) return "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Statistical efficiency: the drift model when the run has seen >= 2 batch sizes; else the plain
// theory, measured at the one batch in the history or, with none, at `current_batch` (samples), and
// at the run's progress, beyond which the noise grows by the prior the physics allows, updated by
// what the history at that one batch shows.
estimator::EfficiencyModel EfficiencyFor(const Snapshot& s, const FitAndSearchOptions& o,
                                         double current_batch) {
  if (o.efficiency_model) return *o.efficiency_model;
  std::vector<double> batches;
  for (const auto& ob : s.noise_history)
    if (std::find(batches.begin(), batches.end(), ob.batch) == batches.end())
      batches.push_back(ob.batch);
  if (batches.size() < 2)
    return estimator::EfficiencyModel::FromNoiseAndHistory(
        s.noise, s.noise_history, s.progress, o.efficiency,
        batches.empty() ? current_batch : batches[0]);
  estimator::EfficiencyFitOptions eo = o.efficiency;
  if (eo.base_batch <= 0) eo.base_batch = s.noise.base_batch;
  return estimator::FitEfficiency(s.noise_history, eo);
}

// Keep the straggler or replace the slow machine: the models were fitted to what the hardware does
// without the slow worker; staying means running the rest at `slowdown` times the predicted time,
// replacing the slow machine costs one restart (CostOptions::switch_s) at the current price.
void PriceStraggler(const search::Recommendation& r, const search::RecommendOptions& ro,
                    double slowdown, nlohmann::json* j) {
  const double keep_h = r.current.hours * slowdown, keep_usd = r.current.cost * slowdown;
  const double restart_h = ro.cost.switch_s / 3600.0;
  const double replace_h = r.current.hours + restart_h;
  const double replace_usd = r.current.cost + r.current.price_per_hour * restart_h;
  const bool cost_goal = ro.objective.goal == search::Goal::kCost;
  const double keep_v = cost_goal ? keep_usd : keep_h;
  const double replace_v = cost_goal ? replace_usd : replace_h;
  const bool replace = replace_v < keep_v * (1 - ro.hysteresis);
  (*j)["straggler"] = {{"factor", slowdown},
                       {"keep", {{"hours", keep_h}, {"cost_usd", keep_usd}}},
                       {"replace", {{"hours", replace_h}, {"cost_usd", replace_usd}}},
                       {"advice", replace ? "replace the slow worker" : "keep"}};
  (*j)["reason"] =
      r.reason + "; a straggler slows the current configuration by " +
      Fixed((slowdown - 1) * 100, 0) + "%: keeping it costs " +
      (cost_goal ? search::FormatCost(keep_usd, r.cost_unit) : Fixed(keep_h, 2) + " h") +
      ", replacing the slow worker " +
      (cost_goal ? search::FormatCost(replace_usd, r.cost_unit) : Fixed(replace_h, 2) + " h") +
      (replace ? " (advised)" : " (not worth a restart)");
}

// The progress (B0-steps) the current configuration makes in `hours`: its measured step time (the
// fastest measured configuration when the current one was not measured) and the gain of its batch.
double RateHorizon(const Snapshot& s, const search::RecommendRequest& req,
                   const estimator::EfficiencyModel& eff, double hours) {
  const core::Measurement* cur = nullptr;
  for (const auto& m : req.profile) {
    if (!(m.step_time > 0)) continue;
    if (m.key.num_nodes == s.current.num_nodes && m.key.num_replicas == s.current.num_replicas &&
        m.key.local_bsz == s.current.local_bsz && m.key.accum_steps == s.current.accum_steps) {
      cur = &m;
      break;
    }
    if (!cur || m.throughput() > cur->throughput()) cur = &m;
  }
  if (!cur) return 1;
  const double batch = static_cast<double>(cur->key.global_batch());
  const double steps = eff.StepsToProgress(batch, s.progress, s.progress + 1).steps;
  const double gain = steps > 0 && std::isfinite(steps) ? 1 / steps : 1;
  return std::max(1e-9, hours * 3600 / cur->step_time * gain);
}

// The rate objective's numbers for each evaluation of the record: USD per B0-step and B0-steps per
// hour over the priced horizon.
void AddRates(double horizon, double hours, nlohmann::json* j) {
  (*j)["target_progress"] = nullptr;
  (*j)["rate"] = {{"horizon_progress", horizon}, {"horizon_hours", hours}};
  auto add = [&](nlohmann::json& e) {
    if (!e.is_object() || !e.contains("cost_usd") || !e["cost_usd"].is_number()) return;
    const double usd = e["cost_usd"].get<double>(), h = e["hours"].get<double>();
    e["usd_per_progress"] = usd / horizon;
    e["progress_per_hour"] = h > 0 ? horizon / h : 0.0;
  };
  for (const char* k : {"current", "proposed", "best_predicted"})
    if (j->contains(k)) add((*j)[k]);
  if (j->contains("alternatives"))
    for (auto& a : (*j)["alternatives"]) add(a);
}

std::string LogLine(const search::Recommendation& r, const std::string& reason) {
  const char* action = search::ActionName(r.action);
  std::string line = std::string("cloudtune: ") + action + " " + r.proposed.config.ToString() +
                     ": " + Fixed(r.proposed.hours, 2) + " h, " +
                     search::FormatCost(r.proposed.cost, r.cost_unit);
  if (r.has_current && r.action != search::Recommendation::Action::kKeep)
    line += " (now " + Fixed(r.current.hours, 2) + " h, " +
            search::FormatCost(r.current.cost, r.cost_unit) + ")";
  return line + " - " + reason;
}

}  // namespace

double Target::Progress(double base_batch) const {
  if (progress > 0) return progress;
  if (steps > 0) return steps;  // base_batch is the initial global batch: one step, one B0-step
  if (!(base_batch > 0)) return 0;
  if (samples > 0) return samples / base_batch;
  if (epochs > 0 && dataset_size > 0) return epochs * dataset_size / base_batch;
  return 0;
}

std::string Target::ToString() const {
  auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (progress > 0) return num(progress) + " B0-steps";
  if (steps > 0) return num(steps) + " steps";
  if (samples > 0) return num(samples) + " samples";
  if (epochs > 0)
    return num(epochs) + " epochs" + (dataset_size > 0 ? "" : " (needs CLOUDTUNE_DATASET_SIZE)");
  return "none";
}

bool FitAndSearchOptions::IsValid(std::string* error) const {
  for (double v :
       {target.progress, target.steps, target.samples, target.epochs, target.dataset_size})
    if (!(v >= 0) || !std::isfinite(v)) {
      if (error) *error = "targets and the dataset size must be finite and >= 0";
      return false;
    }
  if (!(rate_horizon_hours > 0) || !std::isfinite(rate_horizon_hours)) {
    if (error) *error = "rate_horizon_hours must be > 0";
    return false;
  }
  if (!recommend.IsValid(error)) return false;
  if (!throughput.IsValid(error)) return false;
  if (!efficiency.IsValid(error)) return false;
  const search::Catalog& cat = catalog ? *catalog : search::DefaultCatalog();
  if (!instance_type.empty() && cat.Find(instance_type) < 0) {
    if (error) *error = "instance type '" + instance_type + "' is not in the catalog";
    return false;
  }
  return true;
}

FitAndSearchOptions SearchOptionsFrom(const Options& options, const search::Catalog* catalog) {
  FitAndSearchOptions fo;
  fo.catalog = catalog;
  core::Goal goal = core::Goal::kCost;
  core::ParseGoal(options.objective, &goal);  // Options::IsValid has checked it
  fo.recommend.objective.goal = goal;
  fo.recommend.objective.deadline_h = options.deadline_hours;
  fo.recommend.objective.budget_usd = options.budget_usd;
  fo.recommend.decide_again_s = options.refit_seconds;
  fo.target.progress = options.target_progress;
  fo.target.steps = options.target_steps;
  fo.target.samples = options.target_samples;
  fo.target.epochs = options.target_epochs;
  fo.target.dataset_size = options.dataset_size;
  if (options.max_local_batch > 0) fo.recommend.space.max_local_bsz = options.max_local_batch;
  fo.recommend.space.max_accum_steps = options.max_accum_steps;
  fo.recommend.space.max_nodes = options.max_nodes;
  fo.recommend.space.max_gpus = options.max_gpus;
  fo.recommend.space.max_batch_growth = options.max_batch_growth;
  fo.recommend.mixed_max_types = options.mixed_types;
  fo.recommend.space.wait_for_spot =
      options.wait_for_spot && goal == core::Goal::kCost && !(options.deadline_hours > 0);
  fo.recommend.wait_for_spot_over_budget = options.wait_for_spot;
  fo.recommend.observe_batch_first = options.observe_batch_first;
  // A job that watches for revocation notices checkpoints on one (Runtime::ShouldCheckpoint).
  if (!options.preemption_url.empty())
    fo.recommend.cost.notice_s = UsableNoticeSeconds(
        NoticeLeadSeconds(DetectProvider(options.preemption_url)), options.preemption_poll_seconds);
  fo.instance_type = options.instance_type;
  if (!options.candidates.empty()) {
    try {
      fo.candidates = CandidatesFromTrace(options.candidates, options.instance_type);
    } catch (const InputError& e) {
      throw InputError(std::string("CLOUDTUNE_CANDIDATES: ") + e.what());
    }
  }
  if (catalog) {
    fo.recommend.space.types = AllowedTypes(*catalog, options.clouds, options.gpus);
    const auto& allowed = fo.recommend.space.types;
    if (!allowed.empty() && !fo.candidates.empty()) {
      std::vector<search::Config> kept;
      for (const search::Config& c : fo.candidates)
        if (std::find(allowed.begin(), allowed.end(), c.type) != allowed.end()) kept.push_back(c);
      if (kept.empty())
        throw InputError(
            "CLOUDTUNE_CANDIDATES: none of its configurations is on an allowed type "
            "(CLOUDTUNE_CLOUDS, CLOUDTUNE_GPUS)");
      fo.candidates = std::move(kept);
    }
  }
  return fo;
}

std::vector<std::string> AllowedTypes(const search::Catalog& catalog, const std::string& clouds,
                                      const std::string& gpus, const std::string& clouds_name,
                                      const std::string& gpus_name) {
  const std::vector<std::string> c = Options::List(clouds), g = Options::List(gpus);
  if (c.empty() && g.empty()) return {};
  auto types_on = [&](const std::string& named, const std::vector<std::string>& cs,
                      const std::vector<std::string>& gs) {
    try {
      return search::TypesOn(catalog, cs, gs);
    } catch (const InputError& e) {
      throw InputError(named + ": " + e.what());
    }
  };
  const std::string named_c = clouds_name + "='" + clouds + "'";
  const std::string named_g = gpus_name + "='" + gpus + "'";
  types_on(named_c, c, {});  // each list on its own first, so that the message names the one
  types_on(named_g, {}, g);
  return types_on(named_c + " with " + named_g, c, g);
}

std::vector<search::Config> CandidatesFromTrace(const std::string& path,
                                                const std::string& default_type) {
  std::vector<search::Config> out;
  for (const core::Measurement& m : estimator::ReadTraces({path})) {
    const core::ConfigKey& k = m.key;
    if (k.num_replicas % k.num_nodes != 0) continue;
    search::Config c;
    c.type = k.instance_type.empty() ? default_type : k.instance_type;
    c.nodes = k.num_nodes;
    c.gpus_per_node = k.num_replicas / k.num_nodes;
    c.local_bsz = k.local_bsz;
    c.accum_steps = k.accum_steps;
    out.push_back(c);
  }
  if (out.empty()) throw InputError(path + ": no evenly placed configuration to propose");
  return out;
}

void DestraggleProfile(const core::ConfigKey& current, double slowdown,
                       std::vector<core::Measurement>* profile) {
  for (auto& m : *profile) {
    if (m.key.num_nodes != current.num_nodes || m.key.num_replicas != current.num_replicas ||
        m.key.local_bsz != current.local_bsz || m.key.accum_steps != current.accum_steps)
      continue;
    // The fast ranks wait for the slow one inside the all-reduce, so the excess is sync time.
    const double clean = m.step_time / slowdown;
    m.sync_time = std::max(0.0, std::min(m.sync_time - (m.step_time - clean), 0.99 * clean));
    m.step_time = clean;
  }
}

search::RecommendRequest BuildRecommendRequest(const Snapshot& s, const FitAndSearchOptions& o,
                                               bool preempted) {
  search::RecommendRequest req;
  const std::string type = o.instance_type.empty() ? s.current.instance_type : o.instance_type;
  req.profile = s.profile;
  for (auto& m : req.profile)
    if (m.key.instance_type.empty()) m.key.instance_type = type;
  req.noise = s.noise;
  search::Config cur;
  cur.type = type;
  cur.nodes = std::max(1, s.current.num_nodes);
  cur.gpus_per_node = s.current_gpus_per_node();
  cur.local_bsz = s.current.local_bsz;
  cur.accum_steps = s.current.accum_steps;
  cur.purchase = s.purchase.value_or(o.purchase);
  if (preempted && cur.nodes > 1) --cur.nodes;
  // Its spot nodes are gone (revoked, or refused on request): staying means on demand, unless a
  // spot cluster waits the shortage out (SpaceOptions::wait_for_spot).
  const bool waits = o.recommend.space.wait_for_spot && cur.purchase == search::Purchase::kSpot;
  if (auto a = s.spot_nodes_available.find(type);
      !waits && a != s.spot_nodes_available.end() && cur.purchase != search::Purchase::kOnDemand &&
      search::SpotNodes(cur.nodes, cur.purchase) > a->second) {
    cur.purchase = search::Purchase::kOnDemand;
    req.relaunch_current = true;  // its nodes are gone: staying launches them again
  }
  if (s.mixed_cluster) {
    req.relaunch_current = true;  // it runs another cluster
    search::MixedConfig m = search::MixedConfigOf(s.mixed_parts);
    if (m.global_batch > 0) req.current_mixed = std::move(m);  // every part's batch known
  }
  req.current = cur;
  req.catalog = o.catalog;
  req.options = o.recommend;
  const double target = o.target.Progress(s.noise.base_batch);
  if (target > 0 && s.progress >= target)
    throw TargetReached("the target progress is reached (" + Fixed(s.progress, 1) + " of " +
                        Fixed(target, 1) + " B0-steps): nothing left to plan");
  req.options.target_progress = target;
  req.options.current_progress = std::min(s.progress, target);
  const bool cost_goal = o.recommend.objective.goal == search::Goal::kCost;
  req.options.spent = cost_goal ? s.cost_usd : s.elapsed_seconds / 3600.0;
  req.options.exploration_spent =
      std::min(req.options.spent, cost_goal ? s.exploration_usd : s.exploration_seconds / 3600.0);
  // Deadline and budget hold for the whole run: what is left of them after what was spent. One
  // already missed leaves a sliver, so every candidate misses it and the reason says so.
  search::ObjectiveOptions& obj = req.options.objective;
  if (obj.deadline_h > 0)
    obj.deadline_h = std::max(1e-6, obj.deadline_h - s.elapsed_seconds / 3600.0);
  if (obj.budget_usd > 0) obj.budget_usd = std::max(1e-6, obj.budget_usd - s.cost_usd);
  req.throughput = o.throughput;
  req.gradient_bytes = s.gradient_bytes;
  req.candidates = o.candidates;
  // Spot capacity the job knows of: candidates that need more spot nodes than can be had are out.
  for (const auto& [t, n] : s.spot_nodes_available) req.options.space.spot_nodes_available[t] = n;
  return req;
}

TunerResult FitAndSearch(const Snapshot& s, const RefitContext& ctx, const FitAndSearchOptions& o) {
  if (s.profile.empty()) throw NotReady("no measured configuration yet");
  if (!o.efficiency_model && (!(s.noise.grad_sqr > 0) || !(s.noise.base_batch > 0)))
    throw NotReady("no gradient noise estimate yet");
  const bool preempted = ctx.trigger == "preemption";
  search::RecommendRequest req = BuildRecommendRequest(s, o, preempted);
  // Spot priced with the revocation rates the job has met (the catalog's where it has not).
  std::optional<search::Catalog> learned;
  if (!s.spot_exposure.empty()) {
    learned = o.catalog ? *o.catalog : search::DefaultCatalog();
    search::LearnRevocationRates(s.spot_exposure, o.recommend.cost.revocation_prior_node_hours,
                                 &*learned);
    req.catalog = &*learned;
  }
  const double slowdown = s.straggler_factor > 1 ? s.straggler_factor : 1.0;
  if (slowdown > 1) DestraggleProfile(s.current, slowdown, &req.profile);
  req.efficiency = EfficiencyFor(
      s, o,
      static_cast<double>(req.current ? req.current->global_batch() : s.current.global_batch()));
  const bool rate = !(req.options.target_progress > 0);
  double horizon = 0;  // B0-steps priced by the rate objective
  if (rate) {
    horizon = RateHorizon(s, req, *req.efficiency, o.rate_horizon_hours);
    req.options.current_progress = s.progress;
    req.options.target_progress = s.progress + horizon;
    req.options.objective.deadline_h = 0;
    req.options.objective.budget_usd = 0;
  }

  const search::Recommendation r = search::Recommend(req);
  TunerResult out;
  out.decision = r;
  out.efficiency = std::make_shared<const estimator::EfficiencyModel>(*req.efficiency);
  out.recommendation = r.ToJson();
  auto& j = out.recommendation;
  // The throughput model of the current type, exactly as the search used it.
  const auto model = r.throughput_models.find(req.current->type);
  j["models"] = {
      {"throughput", model != r.throughput_models.end() ? model->second : nlohmann::json()},
      {"efficiency", req.efficiency->ToJson()}};
  j["progress"] = s.progress;
  j["target_progress"] = rate ? nlohmann::json() : nlohmann::json(req.options.target_progress);
  j["target"] = o.target.ToString();
  if (rate) AddRates(horizon, o.rate_horizon_hours, &j);
  j["step"] = s.step;
  j["straggler_factor"] = s.straggler_factor;
  j["trigger"] = ctx.trigger;
  j["preempted"] = preempted;
  if (slowdown > 1.0 + 1e-9 && r.has_current) PriceStraggler(r, req.options, slowdown, &j);
  out.change_key = std::string(search::ActionName(r.action)) + "|" + r.proposed.config.ToString();
  if (r.in_process && !(r.in_process->config == r.proposed.config))  // a batch for now, in process
    out.change_key += "|" + r.in_process->config.ToString();
  out.log_line = LogLine(r, j["reason"].get<std::string>());
  return out;
}

FitAndSearchFn MakeFitAndSearch(FitAndSearchOptions options) {
  return [o = std::move(options)](const Snapshot& s, const RefitContext& ctx) {
    return FitAndSearch(s, ctx, o);
  };
}

}  // namespace cloudtune::runtime
