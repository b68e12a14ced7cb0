#include "plugin/online.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "plugin/plugin.h"
#include "plugin/service/http_server.h"
#include "plugin/service/preemption.h"
#include "plugin/service/state.h"
#include "plugin/service/tuner.h"
#include "search/catalog.h"

namespace cloudtune::plugin {
namespace {

constexpr size_t kMaxNoiseHistory = 64;  // bounds the per-snapshot copy

std::string Num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// Restored rows and live rows of the same configuration: row-weighted means.
std::vector<estimator::Measurement> MergeProfiles(const std::vector<estimator::Measurement>& a,
                                                  const std::vector<estimator::Measurement>& b) {
  if (a.empty()) return b;
  std::map<estimator::ConfigKey, estimator::Measurement> by_key;
  for (const auto* part : {&a, &b}) {
    for (const auto& m : *part) {
      auto it = by_key.find(m.key);
      if (it == by_key.end()) {
        by_key.emplace(m.key, m);
        continue;
      }
      estimator::Measurement& o = it->second;
      const double wo = std::max(1, o.rows), wm = std::max(1, m.rows);
      o.step_time = (o.step_time * wo + m.step_time * wm) / (wo + wm);
      o.sync_time = (o.sync_time * wo + m.sync_time * wm) / (wo + wm);
      o.rows = static_cast<int>(wo + wm);
    }
  }
  std::vector<estimator::Measurement> out;
  out.reserve(by_key.size());
  for (auto& [k, m] : by_key) out.push_back(std::move(m));
  return out;
}

}  // namespace

class Online {
 public:
  explicit Online(Plugin* plugin) : plugin_(plugin), opt_(plugin->options()) {
    leader_ = plugin->job().rank == 0;
    quiet_ = opt_.log_level == "error";
  }
  ~Online() { StopThreads(); }

  void Start() {
    if (leader_) {
      RestoreState();
      StartTuner();
      StartHttp();
    }
    StartPreemption();
  }

  // Training thread, rank 0, once per measurement interval.
  void Observe(const std::shared_ptr<const Snapshot>& p) {
    if (!p || stopped_) return;
    tuner_->Offer(Convert(*p));
  }

  // Training thread.
  void Stop() {
    if (stopped_.exchange(true)) return;
    if (leader_) plugin_->SetObserver({});
    StopThreads();
    if (leader_) SaveFinal();
  }

  bool should_checkpoint() const { return preemption_ && preemption_->should_checkpoint(); }

 private:
  void Log(const std::string& line) const {
    if (!quiet_) std::cerr << line + "\n" << std::flush;
  }

  // ---- state ----
  void RestoreState() {
    state_path_ = opt_.state;
    if (state_path_.empty()) return;
    const char* rc = std::getenv("TORCHELASTIC_RESTART_COUNT");
    const bool restarted = rc && std::atoi(rc) > 0;
    std::error_code ec;
    if (!std::filesystem::exists(state_path_, ec) && !restarted) return;
    service::LoadResult r = service::LoadState(state_path_, "");
    if (r.status == service::LoadStatus::kRejected) {
      Log("cloudtune: ignoring saved state: " + r.message);
      return;
    }
    if (r.status != service::LoadStatus::kLoaded || !r.state) {
      if (restarted) Log("cloudtune: restart without saved state '" + state_path_ + "'");
      return;
    }
    base_ = service::RestoreSnapshot(*r.state);
    if (base_.current.num_nodes > 0)
      base_.gpus_per_node = std::max(1, base_.current.num_replicas / base_.current.num_nodes);
    restored_ = true;
    Log("cloudtune: restored state from " + state_path_ + ": " +
        std::to_string(base_.profile.size()) + " configuration(s), step " +
        std::to_string(base_.step) + ", progress " + Num(base_.progress) + " B0-steps");
  }

  void Save(const service::Snapshot& s, const nlohmann::json* recommendation) {
    if (state_path_.empty()) return;
    std::lock_guard<std::mutex> lock(save_mu_);
    std::string error;
    if (!service::SaveState(state_path_, service::MakeSavedState(s, recommendation, ""), &error)) {
      if (!save_error_logged_) Log("cloudtune: cannot save state: " + error);
      save_error_logged_ = true;
    }
  }

  void SaveFinal() {
    if (state_path_.empty()) return;
    try {
      auto last = tuner_ ? tuner_->LatestSnapshot() : nullptr;
      if (!last && !restored_) return;  // nothing measured, nothing learned
      Snapshot p;                       // what the plugin knows now (training thread)
      p.step = plugin_->step();
      p.config = last ? last->current : base_.current;
      p.profile = plugin_->profile();
      const hooks::GnsState g = plugin_->noise();
      p.noise = estimator::NoiseState{g.grad_sqr, g.grad_var, g.base_batch, g.biased};
      p.noise_valid = g.valid;
      auto s = Convert(p);
      auto latest = tuner_ ? tuner_->Latest() : nullptr;
      Save(*s, latest.get());
    } catch (const std::exception& e) {
      Log(std::string("cloudtune: cannot save state: ") + e.what());
    }
  }

  // ---- plugin::Snapshot → service::Snapshot (training thread; O(configurations)) ----
  std::shared_ptr<const service::Snapshot> Convert(const Snapshot& p) {
    auto s = std::make_shared<service::Snapshot>();
    const double batch = static_cast<double>(p.config.global_batch());
    const int64_t steps = std::max<int64_t>(0, p.step - last_step_);
    last_step_ = std::max(last_step_, p.step);
    const estimator::NoiseState& noise = p.noise_valid || !restored_ ? p.noise : base_.noise;
    const bool have_noise = (p.noise_valid || restored_) && noise.grad_sqr > 0 &&
                            noise.base_batch > 0 && std::isfinite(noise.grad_var);
    // Progress in B0-steps: each step at batch B advances Gain(B) (1 before the noise is known).
    double gain = 1;
    if (have_noise && batch > 0) gain = estimator::Gain(noise, batch);
    if (std::isfinite(gain) && gain > 0) progress_ += static_cast<double>(steps) * gain;
    if (p.noise_valid && batch > 0) {
      history_.push_back({batch, base_.progress + progress_,
                          static_cast<double>(base_.step + p.step), p.noise.grad_sqr,
                          p.noise.grad_var});
      if (history_.size() > kMaxNoiseHistory) history_.pop_front();
    }
    s->step = base_.step + p.step;
    s->progress = base_.progress + progress_;
    s->current = p.config;
    if (s->current.num_nodes > 0)
      s->gpus_per_node = std::max(1, s->current.num_replicas / s->current.num_nodes);
    s->profile = MergeProfiles(base_.profile, p.profile);
    s->noise = noise;
    s->noise_history = base_.noise_history;
    s->noise_history.insert(s->noise_history.end(), history_.begin(), history_.end());
    step_.store(s->step, std::memory_order_relaxed);
    return s;
  }

  // ---- tuner ----
  void StartTuner() {
    service::FitAndSearchOptions fo;
    std::string why;
    bool ok = true;
    try {
      catalog_ = search::ResolveCatalog(opt_.catalog);
      fo.catalog = &catalog_;
    } catch (const std::exception& e) {
      ok = false;
      why = std::string("catalog: ") + e.what();
    }
    fo.recommend.objective.goal =
        opt_.objective == "time" ? search::Goal::kTime : search::Goal::kCost;
    fo.recommend.objective.deadline_h = opt_.deadline_hours;
    fo.recommend.objective.budget_usd = opt_.budget_usd;
    fo.recommend.target_progress = opt_.target_progress;
    if (opt_.max_local_batch > 0) fo.recommend.space.max_local_bsz = opt_.max_local_batch;
    fo.instance_type = opt_.instance_type;
    if (ok && !fo.IsValid(&why)) ok = false;
    service::FitAndSearchFn inner;
    if (ok) inner = service::MakeFitAndSearch(fo);
    auto fit = [this, inner, why](const service::Snapshot& s,
                                  const service::RefitContext& c) -> service::TunerResult {
      service::TunerResult r;
      try {
        if (!inner) throw std::runtime_error("tuner off: " + why);
        // After a notice every refit plans for the remaining fleet.
        const bool preempted = preempted_.load() || c.trigger == "preemption";
        service::RefitContext ctx = c;
        if (preempted) ctx.trigger = "preemption";
        r = inner(s, ctx);
        r.recommendation["trigger"] = c.trigger;
        if (preempted) r.change_key += "|preempted";
      } catch (...) {
        Save(s, nullptr);
        throw;
      }
      // What the recommendation was computed from, so `cloudtune recommend` can be re-run on it.
      std::ostringstream csv;
      estimator::WriteTrace(csv, s.profile);
      r.recommendation["inputs"] = {{"step", s.step},
                                    {"progress", s.progress},
                                    {"noise",
                                     {{"grad_sqr", s.noise.grad_sqr},
                                      {"grad_var", s.noise.grad_var},
                                      {"base_batch", s.noise.base_batch},
                                      {"biased", s.noise.biased}}},
                                    {"noise_history_batches",
                                     [&] {
                                       std::vector<double> b;
                                       for (const auto& o : s.noise_history)
                                         if (std::find(b.begin(), b.end(), o.batch) == b.end())
                                           b.push_back(o.batch);
                                       return b;
                                     }()},
                                    {"current",
                                     {{"num_nodes", s.current.num_nodes},
                                      {"num_replicas", s.current.num_replicas},
                                      {"gpus_per_node", s.gpus_per_node},
                                      {"local_bsz", s.current.local_bsz},
                                      {"accum_steps", s.current.accum_steps},
                                      {"instance_type", s.current.instance_type}}},
                                    {"restored", restored_},
                                    {"profile_csv", csv.str()}};
      Save(s, &r.recommendation);
      return r;
    };
    service::TunerOptions to;
    to.refit_seconds = opt_.refit_seconds;
    Plugin* plugin = plugin_;
    tuner_ = std::make_unique<service::Tuner>(
        to, fit,
        [plugin](const std::string& kind, const nlohmann::json& record) {
          plugin->sidecar()->Write(kind, record.value("step", 0LL), record);
        },
        [this](const std::string& line) { Log(line); });
    tuner_->Start();
    if (restored_) {
      tuner_->Offer(std::make_shared<const service::Snapshot>(base_));
      tuner_->RequestRefit("restored");
    }
    plugin_->SetObserver([this](std::shared_ptr<const Snapshot> s) { Observe(s); });
  }

  // ---- HTTP ----
  void StartHttp() {
    if (opt_.http.empty() || !tuner_) return;
    service::HttpOptions ho;
    std::string error;
    if (!service::HttpOptions::Parse(opt_.http, &ho, &error)) {
      Log("cloudtune: CLOUDTUNE_HTTP='" + opt_.http + "': " + error + "; endpoint off");
      return;
    }
    const service::PreemptionWatcher** watcher = &watcher_view_;
    auto server = std::make_unique<service::HttpServer>(
        ho, service::MakeHttpProviders(*tuner_, [watcher](service::MetricsSnapshot* m) {
          const service::PreemptionWatcher* w = *watcher;
          m->preemption_notice = w && w->should_checkpoint() ? 1 : 0;
        }));
    if (!server->Start(&error)) {
      Log("cloudtune: http: " + error + "; endpoint off");
      return;
    }
    http_ = std::move(server);
    Log("cloudtune: serving /v1/recommendation, /v1/profile and /metrics on " + ho.host + ":" +
        std::to_string(http_->BoundPort()));
  }

  // ---- preemption ----
  void StartPreemption() {
    if (opt_.preemption_url.empty()) return;
    service::PreemptionOptions po;
    po.url = opt_.preemption_url;
    po.poll_seconds = opt_.preemption_poll_seconds;
    auto watcher = std::make_unique<service::PreemptionWatcher>(
        po,
        [this](const service::PreemptionNotice& n) {
          if (!leader_) return;
          nlohmann::json rec = n.ToJson();
          rec["notice_time"] = rec["time"];  // the record's "time" is the sidecar's clock
          rec.erase("time");
          plugin_->sidecar()->Write("preemption", step_.load(std::memory_order_relaxed), rec);
          preempted_ = true;  // the watcher logged the notice
          if (tuner_) tuner_->RequestRefit("preemption");
        },
        leader_ ? service::PreemptionWatcher::LogFn([this](const std::string& l) { Log(l); })
                : service::PreemptionWatcher::LogFn());
    std::string error;
    if (!watcher->Start(&error)) {
      if (leader_) Log("cloudtune: preemption watcher off: " + error);
      return;
    }
    preemption_ = std::move(watcher);
    watcher_view_ = preemption_.get();
  }

  void StopThreads() {
    // Order: nothing calls into the tuner or the sidecar after it is stopped.
    if (preemption_) preemption_->Stop();
    if (http_) http_->Stop();
    if (tuner_) tuner_->Stop();
  }

  Plugin* plugin_;
  service::Options opt_;
  bool leader_ = false;
  bool quiet_ = false;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> preempted_{false};  // a notice was seen (rank 0)
  search::Catalog catalog_;
  std::unique_ptr<service::Tuner> tuner_;
  std::unique_ptr<service::HttpServer> http_;
  std::unique_ptr<service::PreemptionWatcher> preemption_;
  const service::PreemptionWatcher* watcher_view_ = nullptr;  // for /metrics

  // Saved state.
  std::string state_path_;
  std::mutex save_mu_;
  bool save_error_logged_ = false;
  bool restored_ = false;
  service::Snapshot base_;  // the restored snapshot (empty when none)

  // Training-thread bookkeeping of Convert().
  int64_t last_step_ = 0;
  double progress_ = 0;  // B0-steps made by this process
  std::deque<estimator::NoiseObservation> history_;
  std::atomic<long long> step_{0};  // latest step offered (for records written by other threads)
};

std::shared_ptr<Online> StartOnline(Plugin* plugin) {
  if (!plugin || !plugin->enabled()) return nullptr;
  try {
    const service::Options& o = plugin->options();
    const bool leader = plugin->job().rank == 0;
    if (!leader && o.preemption_url.empty()) return nullptr;
    auto online = std::make_shared<Online>(plugin);
    online->Start();
    return online;
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: online tuner not started: " << e.what() << "\n";
    plugin->SetObserver({});
    return nullptr;
  }
}

void StopOnline(Plugin* plugin, Online* online) {
  (void)plugin;
  if (!online) return;
  try {
    online->Stop();
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: stopping the online tuner: " << e.what() << "\n";
  }
}

bool OnlineShouldCheckpoint(const Online* online) { return online && online->should_checkpoint(); }

bool Plugin::ShouldCheckpoint() const { return OnlineShouldCheckpoint(online_.get()); }

}  // namespace cloudtune::plugin
