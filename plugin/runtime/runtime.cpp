#include "plugin/runtime/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "estimator/core/error.h"
#include "estimator/core/trace.h"
#include "estimator/efficiency.h"
#include "plugin/runtime/detail/thread.h"
#include "plugin/runtime/http_server.h"
#include "plugin/runtime/preemption.h"
#include "plugin/runtime/state.h"
#include "plugin/runtime/straggler.h"
#include "plugin/runtime/tuner.h"
#include "search/cost.h"

namespace cloudtune::runtime {
namespace {

std::string Num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::string StragglerKey(long long step, int rank) {
  return "cloudtune/straggler/" + std::to_string(step) + "/" + std::to_string(rank);
}

// What a recommendation was computed from, so `cloudtune recommend --from` can re-run it.
nlohmann::json InputsJson(const core::Snapshot& s, bool restored) {
  std::ostringstream csv;
  estimator::WriteTrace(csv, s.profile);
  std::vector<double> batches;
  for (const auto& o : s.noise_history)
    if (std::find(batches.begin(), batches.end(), o.batch) == batches.end())
      batches.push_back(o.batch);
  return {{"step", s.step},
          {"progress", s.progress},
          {"noise",
           {{"grad_sqr", s.noise.grad_sqr},
            {"grad_var", s.noise.grad_var},
            {"base_batch", s.noise.base_batch},
            {"biased", s.noise.biased}}},
          {"noise_history_batches", batches},
          {"current",
           {{"num_nodes", s.current.num_nodes},
            {"num_replicas", s.current.num_replicas},
            {"gpus_per_node", s.current_gpus_per_node()},
            {"local_bsz", s.current.local_bsz},
            {"accum_steps", s.current.accum_steps},
            {"instance_type", s.current.instance_type}}},
          {"restored", restored},
          {"gradient_bytes", s.gradient_bytes},
          {"spot_exposure", SpotExposureJson(s.spot_exposure)},
          {"profile_csv", csv.str()}};
}

}  // namespace

bool AgreeAcrossRanks(KeyValueStore& store, const std::string& prefix, int world_size,
                      bool local_ok, double timeout_seconds, std::string* why) {
  if (why) why->clear();
  try {
    if (!local_ok) store.Add(prefix + "off", 1);
    store.Add(prefix + "arrived", 1);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_seconds));
    long long arrived = 0;
    for (auto wait = std::chrono::milliseconds(1);;
         wait = std::min(wait * 2, std::chrono::milliseconds(50))) {
      arrived = store.Add(prefix + "arrived", 0);
      if (arrived >= world_size || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(wait);
    }
    if (arrived < world_size) {
      if (why)
        *why = std::to_string(world_size - arrived) + " of " + std::to_string(world_size) +
               " rank(s) did not start the plugin within " +
               std::to_string(static_cast<int>(timeout_seconds)) + " s";
      // Latecomers must see "off" too.
      store.Add(prefix + "off", 1);
      return false;
    }
    const long long off = store.Add(prefix + "off", 0);
    if (off > 0 && why) *why = std::to_string(off) + " rank(s) could not switch the plugin on";
    return off == 0;
  } catch (const std::exception& e) {
    if (why) *why = std::string("agreeing through the job's store failed: ") + e.what();
    return false;
  }
}

std::vector<core::Measurement> MergeProfiles(const std::vector<core::Measurement>& a,
                                             const std::vector<core::Measurement>& b) {
  if (a.empty()) return b;
  std::map<core::ConfigKey, core::Measurement> by_key;
  for (const auto* part : {&a, &b}) {
    for (const auto& m : *part) {
      auto it = by_key.find(m.key);
      if (it == by_key.end()) {
        by_key.emplace(m.key, m);
        continue;
      }
      core::Measurement& o = it->second;
      const double wo = std::max(1, o.rows), wm = std::max(1, m.rows);
      o.step_time = (o.step_time * wo + m.step_time * wm) / (wo + wm);
      o.sync_time = (o.sync_time * wo + m.sync_time * wm) / (wo + wm);
      o.rows = static_cast<int>(wo + wm);
    }
  }
  std::vector<core::Measurement> out;
  out.reserve(by_key.size());
  for (auto& [k, m] : by_key) out.push_back(std::move(m));
  return out;
}

Runtime::Runtime(RuntimeSetup setup) : setup_(std::move(setup)), opt_(setup_.options) {
  leader_ = setup_.rank == 0;
  quiet_ = opt_.log_level == "error";
  try {
    catalog_ = search::ResolveCatalog(opt_.catalog);
  } catch (const std::exception& e) {
    catalog_error_ = e.what();
    search_error_ = "catalog: " + catalog_error_;
    catalog_ = search::DefaultCatalog();
  }
  try {
    search_ = SearchOptionsFrom(opt_, &catalog_);
  } catch (const std::exception& e) {
    options_error_ = e.what();
    if (search_error_.empty()) search_error_ = options_error_;
    search_.catalog = &catalog_;
  }
  allowed_types_ = search_.recommend.space.types;
  if (setup_.customize) setup_.customize(&search_);
  instance_.instance_type = search_.instance_type;
  instance_.source = "CLOUDTUNE_INSTANCE_TYPE";
  UsePseudoType();
  std::string why;
  if (search_error_.empty() && !search_.IsValid(&why)) search_error_ = why;
}

// An instance type the catalog does not know ("local"): the job's own machines, priced at 1 per
// GPU-hour so that costs read as GPU-hours, on demand only; the search stays on them (there is no
// price to compare other types with), so its advice is about batch and workers.
void Runtime::UsePseudoType() {
  const std::string& type = search_.instance_type;
  if (type.empty() || catalog_.Find(type) >= 0) return;
  search::InstanceType t;
  t.cloud = "local";
  t.name = type;
  t.gpus = std::max(1, setup_.world_size / std::max(1, setup_.num_nodes));
  t.ondemand_per_hour = t.gpus;
  t.network_gbps = search::CatalogOptions{}.default_network_gbps;
  catalog_.types.push_back(t);
  catalog_.cost_unit = search::CostUnit::kGpuHours;  // the search stays on this type (below)
  search_.recommend.space.types = {type};
  search_.recommend.space.allow_spot = search_.recommend.space.allow_anchor = false;
  pseudo_type_ = true;
}

void Runtime::SetTarget(const Target& target) {
  std::lock_guard<std::mutex> lock(target_mu_);
  target_ = target;
}

Runtime::~Runtime() { StopThreads(); }

void Runtime::Log(const std::string& line) const {
  if (quiet_) return;
  if (setup_.log)
    setup_.log(line);
  else
    std::cerr << line + "\n" << std::flush;
}

void Runtime::Record(const std::string& kind, long long step, const nlohmann::json& rec) const {
  if (setup_.record) setup_.record(kind, step, rec);
}

TunerResult Runtime::Decide(const core::Snapshot& s, const std::string& trigger) const {
  if (!search_error_.empty()) throw InputError("tuner off: " + search_error_);
  // After a notice every refit plans for the remaining fleet.
  const bool preempted = preempted_.load() || trigger == "preemption";
  RefitContext ctx{preempted ? "preemption" : trigger, 0};
  // In a live job a straggler found (or recovered) since the snapshot was taken counts too.
  const double factor =
      straggler_on_ ? straggler_factor_.load(std::memory_order_relaxed) : s.straggler_factor;
  std::optional<Target> target;
  {
    std::lock_guard<std::mutex> lock(target_mu_);
    target = target_;
  }
  const FitAndSearchOptions* o = &search_;
  FitAndSearchOptions with_target;
  if (target) {
    with_target = search_;
    with_target.target = *target;
    o = &with_target;
  }
  TunerResult r;
  if (factor != s.straggler_factor) {
    core::Snapshot with = s;
    with.straggler_factor = factor;
    r = FitAndSearch(with, ctx, *o);
  } else {
    r = FitAndSearch(s, ctx, *o);
  }
  if (pseudo_type_)
    r.recommendation["prices"] = "unknown: instance type '" + search_.instance_type +
                                 "' is not in the catalog; costs are GPU-hours";
  if (factor > 1) r.change_key += "|straggler";
  r.recommendation["trigger"] = trigger;
  if (preempted) r.change_key += "|preempted";
  r.recommendation["inputs"] = InputsJson(s, restored_);
  return r;
}

TunerResult Runtime::Refit(const core::Snapshot& s, const RefitContext& c) {
  TunerResult r;
  LookUpHistory();
  const auto warm = std::atomic_load(&warm_);
  try {
    r = warm ? Decide(WarmSnapshot(s, *warm), c.trigger) : Decide(s, c.trigger);
  } catch (...) {
    Save(s, nullptr);
    throw;
  }
  Save(s, &r.recommendation);
  std::atomic_store(&decision_, std::make_shared<const search::Recommendation>(r.decision));
  std::shared_ptr<const core::ConfigKey> measuring;
  if (r.decision.action == search::Recommendation::Action::kMeasure)
    measuring = std::make_shared<const core::ConfigKey>(r.decision.proposed.config.Key());
  std::atomic_store(&measuring_, measuring);
  return r;
}

std::optional<search::Config> Runtime::InProcessBatch(const core::ConfigKey& running,
                                                      std::string* why) const {
  std::string none;
  if (!why) why = &none;
  const auto r = std::atomic_load(&decision_);
  if (!r) {
    *why = "no recommendation yet";
    return {};
  }
  const search::Config& c = r->current.config;
  if (!r->has_current || c.nodes != running.num_nodes || c.replicas() != running.num_replicas ||
      c.local_bsz != running.local_bsz || c.accum_steps != running.accum_steps) {
    *why = "no recommendation for this configuration yet";
    return {};
  }
  auto take = search::InProcessBatch(*r, c);
  const bool relaunch = r->action == search::Recommendation::Action::kMeasure ||
                        (r->mixed && r->mixed->proposed) || !r->proposed.config.SameHardware(c);
  if (!take) {
    *why = "no batch for this hardware in the recommendation: " + r->reason;
  } else if (!relaunch && *take == r->proposed.config) {
    *why = r->reason;
  } else if (!relaunch) {  // the proposal is the current configuration, beyond the limits
    *why =
        "the best batch for this hardware within CLOUDTUNE_MAX_LOCAL_BATCH and "
        "CLOUDTUNE_MAX_ACCUM_STEPS";
  } else {
    *why = std::string("the best batch for this hardware (the tuner proposes to ") +
           search::ActionName(r->action) + " " +
           (r->mixed && r->mixed->proposed ? "a mixed cluster" : r->proposed.config.ToString()) +
           ", which needs a relaunch)";
  }
  return take;
}

// ---- state ----

void Runtime::RestoreState() {
  const std::string& path = opt_.state;
  if (path.empty()) return;
  const bool restarted = setup_.launch.restart_count > 0;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !restarted) return;
  LoadResult r = LoadState(path, "");
  if (r.status == LoadStatus::kRejected) {
    Log("cloudtune: ignoring saved state: " + r.message);
    return;
  }
  if (r.status != LoadStatus::kLoaded || !r.state) {
    if (restarted) Log("cloudtune: restart without saved state '" + path + "'");
    return;
  }
  base_ = RestoreSnapshot(*r.state);
  const std::string left_out = DropUnknownTypes(&base_.profile);
  if (!left_out.empty())
    Log("cloudtune: saved state: its configurations on " + left_out +
        ", not in the catalog, are left out");
  estimator::ThinNoiseHistory(&base_.noise_history, kMaxNoiseHistory);  // across many restarts
  restored_ = true;
  Log("cloudtune: restored state from " + path + ": " + std::to_string(base_.profile.size()) +
      " configuration(s), step " + std::to_string(base_.step) + ", progress " +
      Num(base_.progress) + " B0-steps");
}

void Runtime::Save(const core::Snapshot& s, const nlohmann::json* recommendation) {
  if (opt_.state.empty()) return;
  std::lock_guard<std::mutex> lock(save_mu_);
  std::string error;
  if (!SaveState(opt_.state, MakeSavedState(s, recommendation, ""), &error)) {
    if (!save_error_logged_) Log("cloudtune: cannot save state: " + error);
    save_error_logged_ = true;
  }
}

void Runtime::SaveFinal(const core::Snapshot* last) {
  if (opt_.state.empty()) return;
  try {
    auto latest = tuner_ ? tuner_->LatestSnapshot() : nullptr;
    if (!latest && !restored_) return;  // nothing measured, nothing learned
    core::Snapshot p = last ? *last : (latest ? *latest : base_);
    p.current = latest ? latest->current : base_.current;
    auto s = last ? Convert(p) : std::make_shared<const core::Snapshot>(p);
    auto rec = tuner_ ? tuner_->Latest() : nullptr;
    Save(*s, rec.get());
  } catch (const std::exception& e) {
    Log(std::string("cloudtune: cannot save state: ") + e.what());
  }
}

// ---- what the plugin measured → the tuner's snapshot (training thread; O(configurations)) ----

std::shared_ptr<const core::Snapshot> Runtime::Convert(const core::Snapshot& p) {
  auto s = std::make_shared<core::Snapshot>(p);
  const double batch = static_cast<double>(p.current.global_batch());
  const long long steps = std::max<long long>(0, p.step - last_step_);
  last_step_ = std::max(last_step_, p.step);
  const core::NoiseState& noise = p.noise_valid || !restored_ ? p.noise : base_.noise;
  const bool have_noise = (p.noise_valid || restored_) && noise.usable();
  // Progress in B0-steps: each step at batch B advances Gain(B) (1 before the noise is known).
  double gain = 1;
  if (have_noise && batch > 0) gain = estimator::Gain(noise, batch);
  if (std::isfinite(gain) && gain > 0) progress_ += static_cast<double>(steps) * gain;
  if (p.noise_valid && batch > 0) {
    history_.push_back({batch, base_.progress + progress_, static_cast<double>(base_.step + p.step),
                        p.noise.grad_sqr, p.noise.grad_var});
    estimator::ThinNoiseHistory(&history_, kMaxNoiseHistory);
  }
  s->step = base_.step + p.step;
  s->progress = base_.progress + progress_;
  // Rows labelled with the options' instance type ("local") are of the type found at Start.
  if (opt_.instance_type != search_.instance_type) {
    for (auto& m : s->profile)
      if (m.key.instance_type == opt_.instance_type) m.key.instance_type = search_.instance_type;
    if (s->current.instance_type == opt_.instance_type)
      s->current.instance_type = search_.instance_type;
  }
  if (!s->purchase) s->purchase = search_.purchase;
  if (s->mixed_cluster && s->mixed_parts.empty())  // the one this runtime proposed last
    if (const auto d = std::atomic_load(&decision_)) s->mixed_parts = search::MixedPartsOf(*d);
  CountSpending(p, s.get());
  s->profile = MergeProfiles(base_.profile, s->profile);
  s->noise = noise;
  s->noise_valid = have_noise;
  s->noise_history = base_.noise_history;
  s->noise_history.insert(s->noise_history.end(), history_.begin(), history_.end());
  s->straggler_factor = straggler_factor_.load(std::memory_order_relaxed);
  if (!(s->gradient_bytes > 0)) {  // the model's, once seen; until then the restored job's
    const auto sig = std::atomic_load(&signature_);
    s->gradient_bytes = sig ? sig->gradient_bytes : base_.gradient_bytes;
  }
  step_.store(s->step, std::memory_order_relaxed);
  return s;
}

// What the job has spent: the current configuration's price over the time since the last
// snapshot; time in a configuration the last recommendation asked to measure is exploration.
void Runtime::CountSpending(const core::Snapshot& p, core::Snapshot* s) {
  const double dt = std::max(0.0, p.elapsed_seconds - last_elapsed_);
  last_elapsed_ = std::max(last_elapsed_, p.elapsed_seconds);
  double price = 0;
  const int i = catalog_.Find(s->current.instance_type);
  if (i >= 0)
    price = search::HourlyPrice(catalog_.types[i], std::max(1, s->current.num_nodes),
                                s->purchase.value_or(core::Purchase::kOnDemand));
  spent_usd_ += price * dt / 3600;
  // Spot exposure, and the revocation a notice announced: the search learns the rate from them.
  const int spot_nodes = search::SpotNodes(std::max(1, s->current.num_nodes),
                                           s->purchase.value_or(core::Purchase::kOnDemand));
  const std::string& type = s->current.instance_type;
  if (spot_nodes > 0 && !type.empty()) exposure_[type].node_hours += spot_nodes * dt / 3600;
  if (preempted_.load() && !notice_counted_ && !type.empty()) {
    ++exposure_[type].revocations;
    notice_counted_ = true;
  }
  s->spot_exposure = base_.spot_exposure;
  for (const auto& [t, e] : exposure_) {
    s->spot_exposure[t].node_hours += e.node_hours;
    s->spot_exposure[t].revocations += e.revocations;
  }
  // O(1) here: the worker thread noted what it asked to measure.
  const auto measuring = std::atomic_load(&measuring_);
  const bool exploring = measuring && measuring->num_nodes == s->current.num_nodes &&
                         measuring->num_replicas == s->current.num_replicas &&
                         measuring->local_bsz == s->current.local_bsz &&
                         measuring->accum_steps == s->current.accum_steps;
  if (exploring) {
    explore_usd_ += price * dt / 3600;
    explore_s_ += dt;
  }
  s->elapsed_seconds = base_.elapsed_seconds + p.elapsed_seconds;
  s->cost_usd = base_.cost_usd + spent_usd_;
  s->exploration_usd = base_.exploration_usd + explore_usd_;
  s->exploration_seconds = base_.exploration_seconds + explore_s_;
}

// ---- a live job ----

void Runtime::FindInstance() {
  CloudDetectOptions co;
  co.url = opt_.metadata_url;
  co.gpu_name = setup_.gpu_name;
  co.gpus_per_node = std::max(1, setup_.world_size / std::max(1, setup_.num_nodes));
  CloudInstance found = DetectCloudInstance(co, catalog_);
  if (found.instance_type.empty()) {
    instance_.note = found.note;
    return;
  }
  instance_ = found;
  search_.instance_type = found.instance_type;
  search_.purchase = found.purchase.value_or(core::Purchase::kOnDemand);
  if (pseudo_type_) {  // back to the whole space (or the clouds and GPUs allowed), priced
    search::SpaceOptions fresh;
    search_.recommend.space.types = allowed_types_;
    search_.recommend.space.allow_spot = fresh.allow_spot;
    search_.recommend.space.allow_anchor = fresh.allow_anchor;
    pseudo_type_ = false;
  }
  std::string why;
  search_error_.clear();
  if (!catalog_error_.empty())
    search_error_ = "catalog: " + catalog_error_;
  else if (!options_error_.empty())
    search_error_ = options_error_;
  else if (!search_.IsValid(&why))
    search_error_ = why;
}

// One line: what is known (instance, price, purchase, target, objective) and what would unlock
// more.
std::string Runtime::StartLine() const {
  if (!search_error_.empty())
    return "cloudtune: the tuner cannot search: " + search_error_ +
           " (the job's measurements are still recorded)";
  std::ostringstream l;
  l << "cloudtune: tuner on: instance " << search_.instance_type;
  const int i = catalog_.Find(search_.instance_type);
  if (!pseudo_type_ && i >= 0) {
    char price[64];
    std::snprintf(price, sizeof price, "$%.2f/h",
                  search::HourlyPrice(catalog_.types[i], 1, search_.purchase));
    l << " (" << core::PurchaseName(search_.purchase) << ", " << price << " each, from "
      << instance_.source << ")";
  } else {
    l << " (prices unknown" << (instance_.note.empty() ? "" : ": " + instance_.note)
      << "; batch and worker advice still applies, costs in GPU-hours)";
  }
  const Target t = target_.value_or(search_.target);
  l << ", objective " << core::GoalName(search_.recommend.objective.goal) << ", target "
    << t.ToString();
  if (!t.set())
    l << " (ranked by "
      << (search_.recommend.objective.goal == core::Goal::kCost ? "cost per unit of progress"
                                                                : "progress per hour")
      << ")";
  if (!pseudo_type_ && !allowed_types_.empty())
    l << ", searching " << allowed_types_.size() << " instance type(s)"
      << (opt_.clouds.empty() ? "" : " on " + opt_.clouds)
      << (opt_.gpus.empty() ? "" : " with " + opt_.gpus);
  std::vector<std::string> unlock;
  if (pseudo_type_) unlock.push_back("CLOUDTUNE_INSTANCE_TYPE to price it");
  if (!t.set())
    unlock.push_back(
        "CLOUDTUNE_TARGET_EPOCHS (with CLOUDTUNE_DATASET_SIZE), _STEPS or _SAMPLES to predict "
        "the time and cost to finish");
  for (size_t k = 0; k < unlock.size(); ++k) l << (k ? "; " : "; set ") << unlock[k];
  return l.str();
}

void Runtime::Start() {
  if (started_.exchange(true)) return;
  try {
    if (leader_) {
      if (setup_.detect_instance) FindInstance();
      Log(StartLine());
      RestoreState();
      StartTuner();
    }
    StartPreemption();  // before the HTTP server, whose /metrics reads the watcher's flag
    if (leader_) StartHttp();
    StartStraggler();
  } catch (const std::exception& e) {
    Log(std::string("cloudtune: online tuner not started: ") + e.what());
  }
}

void Runtime::StartTuner() {
  TunerOptions to;
  to.refit_seconds = opt_.refit_seconds;
  // A restored job refits on its restored snapshot at once ("restored"). Until a recommendation is
  // published, every job refits at each snapshot: a restored state may hold nothing usable (only
  // configurations on types the catalog does not know), and its job must not wait a timer period.
  to.refit_until_published = true;
  tuner_ = std::make_unique<Tuner>(
      to, [this](const core::Snapshot& s, const RefitContext& c) { return Refit(s, c); },
      [this](const std::string& kind, const nlohmann::json& record) {
        Record(kind, record.value("step", 0LL), record);
      },
      [this](const std::string& line) { Log(line); });
  tuner_->Start();
  if (restored_) tuner_->Resume(std::make_shared<const core::Snapshot>(base_), "restored");
}

void Runtime::Observe(const core::Snapshot& measured) {
  if (!tuner_ || stopped_) return;
  tuner_->Offer(Convert(measured));
}

void Runtime::StartHttp() {
  if (opt_.http.empty() || !tuner_) return;
  HttpOptions ho;
  std::string error;
  if (!HttpOptions::Parse(opt_.http, &ho, &error)) {
    Log("cloudtune: CLOUDTUNE_HTTP='" + opt_.http + "': " + error + "; endpoint off");
    return;
  }
  auto server =
      std::make_unique<HttpServer>(ho, MakeHttpProviders(*tuner_, [this](MetricsSnapshot* m) {
                                     m->preemption_notice = ShouldCheckpoint() ? 1 : 0;
                                   }));
  if (!server->Start(&error)) {
    Log("cloudtune: http: " + error + "; endpoint off");
    return;
  }
  http_ = std::move(server);
  Log("cloudtune: serving /v1/recommendation, /v1/profile and /metrics on " + ho.host + ":" +
      std::to_string(http_->BoundPort()));
}

void Runtime::StartPreemption() {
  if (opt_.preemption_url.empty()) return;
  PreemptionOptions po;
  po.url = opt_.preemption_url;
  po.poll_seconds = opt_.preemption_poll_seconds;
  auto watcher = std::make_unique<PreemptionWatcher>(
      po,
      [this](const PreemptionNotice& n) {
        if (!leader_) return;
        nlohmann::json rec = n.ToJson();
        rec["notice_time"] = rec["time"];  // the record's "time" is the sidecar's clock
        rec.erase("time");
        Record("preemption", step_.load(std::memory_order_relaxed), rec);
        preempted_ = true;  // the watcher logged the notice
        if (tuner_) tuner_->RequestRefit("preemption");
      },
      leader_ ? PreemptionWatcher::LogFn([this](const std::string& l) { Log(l); })
              : PreemptionWatcher::LogFn());
  std::string error;
  if (!watcher->Start(&error)) {
    if (leader_) Log("cloudtune: preemption watcher off: " + error);
    return;
  }
  preemption_ = std::move(watcher);
}

bool Runtime::ShouldCheckpoint() const { return preemption_ && preemption_->should_checkpoint(); }

std::shared_ptr<const nlohmann::json> Runtime::Latest() const {
  return tuner_ ? tuner_->Latest() : nullptr;
}

std::shared_ptr<const core::Snapshot> Runtime::LatestSnapshot() const {
  return tuner_ ? tuner_->LatestSnapshot() : nullptr;
}

// ---- stragglers ----

void Runtime::StartStraggler() {
  if (opt_.straggler_every <= 0 || setup_.world_size < 2 || !setup_.store) return;
  if (leader_) {
    StragglerOptions so;
    so.every_steps = opt_.straggler_every;
    detector_ = std::make_unique<StragglerDetector>(so);
  }
  straggler_on_ = true;
  strag_thread_ = std::thread([this] {
    detail::NameThisThread("straggler");
    StragglerLoop();
  });
}

void Runtime::StepTimes(long long step, double step_time, double compute_time) {
  if (!straggler_on_) return;
  if (step_time >= 0 && std::isfinite(step_time) && std::isfinite(compute_time)) {
    win_step_ += step_time;
    win_compute_ += compute_time;
    ++win_n_;
  }
  if (step % opt_.straggler_every != 0) return;
  Window w{step, win_n_ ? win_compute_ / win_n_ : -1.0, win_n_ ? win_step_ / win_n_ : -1.0};
  win_step_ = win_compute_ = 0;
  win_n_ = 0;
  {
    std::lock_guard<std::mutex> lock(strag_mu_);
    if (strag_queue_.size() < 64) strag_queue_.push_back(w);  // bounded: drop when stuck
  }
  strag_cv_.notify_one();
}

// Background thread: publish this rank's windows; rank 0 also gathers and detects.
void Runtime::StragglerLoop() {
  for (;;) {
    Window w;
    {
      std::unique_lock<std::mutex> lock(strag_mu_);
      strag_cv_.wait(lock, [&] { return strag_stop_ || !strag_queue_.empty(); });
      if (strag_queue_.empty()) return;  // stopped and drained
      w = strag_queue_.front();
      strag_queue_.pop_front();
    }
    try {
      GatherWindow(w);
    } catch (const std::exception& e) {
      if (!gather_error_logged_ && leader_)
        Log(std::string("cloudtune: straggler gather: ") + e.what());
      gather_error_logged_ = true;
      std::lock_guard<std::mutex> lock(strag_mu_);
      if (strag_stop_) return;
    }
  }
}

void Runtime::GatherWindow(const Window& w) {
  setup_.store->Set(StragglerKey(w.step, setup_.rank), Num(w.compute) + "," + Num(w.step_time));
  if (!leader_) return;
  RankWindow rw;
  rw.step = w.step;
  for (int r = 0; r < setup_.world_size; ++r) {
    const std::string key = StragglerKey(w.step, r);
    const std::string got = setup_.store->Get(key);  // waits (store timeout)
    setup_.store->Delete(key);
    double c = -1, st = -1;
    std::sscanf(got.c_str(), "%lf,%lf", &c, &st);
    rw.compute_time.push_back(c);
    rw.step_time.push_back(st);
  }
  const auto reports = detector_->AddWindow(rw);
  for (const auto& rep : reports) {
    Record("straggler", w.step, rep.ToJson());
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "cloudtune: straggler: rank %d computes %.0f%% slower than the others "
                  "(%d of %d windows); the job runs at 1/%.2f of its speed",
                  rep.rank, (rep.ratio - 1) * 100, rep.hits, rep.windows, rep.factor);
    Log(buf);
  }
  const double before = straggler_factor_.exchange(detector_->Factor());
  // A new straggler, or the last one recovered: refit now.
  if (tuner_ && (!reports.empty() || (before > 1 && detector_->Factor() <= 1)))
    tuner_->RequestRefit("straggler");
}

void Runtime::Stop(const core::Snapshot* last) {
  if (!started_ || stopped_.exchange(true)) return;
  StopThreads();
  if (leader_) SaveFinal(last);
  if (leader_) RecordHistory(last);
}

// ---- job history ----

std::string Runtime::HistoryPath() const {
  if (opt_.history == "off") return "";
  return opt_.history.empty() ? DefaultHistoryPath() : opt_.history;
}

void Runtime::SetModelSignature(const ModelSignature& signature) {
  if (!leader_ || signature.empty() || std::atomic_load(&signature_)) return;
  std::atomic_store(&signature_, std::make_shared<const ModelSignature>(signature));
}

std::string Runtime::DropUnknownTypes(std::vector<core::Measurement>* rows) const {
  // Measurements on an instance type this job's catalog does not know (an earlier run on a machine
  // that was no catalog type, say) can be neither priced nor projected: every refit would fail.
  std::set<std::string> unknown;
  rows->erase(std::remove_if(rows->begin(), rows->end(),
                             [&](const core::Measurement& m) {
                               const std::string& t = m.key.instance_type;
                               if (t.empty() || catalog_.Find(t) >= 0) return false;
                               unknown.insert(t);
                               return true;
                             }),
              rows->end());
  std::string names;
  for (const auto& t : unknown) names += (names.empty() ? "" : ", ") + t;
  return names;
}

void Runtime::LookUpHistory() {
  const auto sig = std::atomic_load(&signature_);
  if (history_looked_up_ || !sig) return;
  history_looked_up_ = true;
  const std::string path = HistoryPath();
  if (path.empty()) return;
  HistoryOptions ho;
  ho.busy_timeout_seconds = 0.5;  // on the worker, before a refit: never wait long for a writer
  std::string error;
  auto h = History::Open(path, ho, &error);
  if (!h) {
    history_error_logged_ = true;
    Log("cloudtune: job history not used: " + error);
    return;
  }
  const auto job = h->Latest(sig->ToString());
  if (!job) {
    Log("cloudtune: job history: no earlier job of this model (" + sig->ToString() + ") in " +
        path);
    return;
  }
  WarmPrior warm = MakeWarmPrior(*job);
  const std::string left_out = DropUnknownTypes(&warm.configurations);
  const auto& confs = warm.configurations;
  Log("cloudtune: warm start from job " + std::to_string(job->id) + " (" + job->job_id + ", " +
      job->recorded_at + "): " + std::to_string(confs.size()) + " configuration(s) and " +
      std::to_string(warm.noise_history.size()) + " noise record(s) it measured" +
      (left_out.empty()
           ? ""
           : " (its configurations on " + left_out + ", not in the catalog, are left out)"));
  std::atomic_store(&warm_, std::make_shared<const WarmPrior>(std::move(warm)));
}

void Runtime::RecordHistory(const core::Snapshot* last) {
  const auto sig = std::atomic_load(&signature_);
  const std::string path = HistoryPath();
  if (!sig || path.empty()) return;
  try {
    auto snap = last ? Convert(*last) : LatestSnapshot();
    if (!snap || snap->profile.empty()) return;
    HistoryOptions ho;
    ho.busy_timeout_seconds = 2;  // at the end of the job: do not hold it up for long
    std::string error;
    auto h = History::Open(path, ho, &error);
    if (!h) {
      if (!history_error_logged_) Log("cloudtune: job history not written: " + error);
      return;
    }
    HistoryJob j;
    j.job_id =
        setup_.launch.run_id.empty() ? "pid-" + std::to_string(::getpid()) : setup_.launch.run_id;
    j.signature = sig->ToString();
    j.parameters = sig->parameters;
    j.instance_type = search_.instance_type;
    j.objective = opt_.objective;
    j.steps = snap->step;
    j.progress = snap->progress;
    j.hours = snap->elapsed_seconds / 3600;
    j.cost_usd = snap->cost_usd;
    j.configurations = snap->profile;
    j.noise = snap->noise_history;
    if (snap->noise_valid) j.last_noise = snap->noise;
    if (auto rec = Latest(); rec && rec->contains("models")) j.models = (*rec)["models"];
    if (h->Record(j, &error) == 0) Log("cloudtune: job history not written: " + error);
  } catch (const std::exception& e) {
    Log(std::string("cloudtune: job history not written: ") + e.what());
  }
}

void Runtime::StopThreads() {
  // Order: nothing calls into the tuner or the record sink after it is stopped.
  if (preemption_) preemption_->Stop();
  {
    std::lock_guard<std::mutex> lock(strag_mu_);
    strag_stop_ = true;
    if (leader_) strag_queue_.clear();  // other ranks drain theirs, so rank 0 never waits
  }
  strag_cv_.notify_all();
  if (strag_thread_.joinable()) strag_thread_.join();
  if (http_) http_->Stop();
  if (tuner_) tuner_->Stop();
}

}  // namespace cloudtune::runtime
