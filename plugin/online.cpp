#include "plugin/online.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "plugin/plugin.h"
#include "plugin/service/http_server.h"
#include "plugin/service/preemption.h"
#include "plugin/service/state.h"
#include "plugin/service/straggler.h"
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
    }
    StartPreemption();  // before the HTTP server, whose /metrics reads the watcher's flag
    if (leader_) StartHttp();
    StartStraggler();
  }

  // Training thread, every rank, every step.
  void StepTimes(int64_t step, double step_time, double compute_time) {
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
    if (base_.noise_history.size() > kMaxNoiseHistory)  // bounded across many restarts
      base_.noise_history.erase(base_.noise_history.begin(),
                                base_.noise_history.end() - kMaxNoiseHistory);
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
    s->straggler_factor = straggler_factor_.load(std::memory_order_relaxed);
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
        // A straggler found since the snapshot was taken counts too.
        const double factor = straggler_factor_.load(std::memory_order_relaxed);
        if (factor != s.straggler_factor) {
          service::Snapshot with = s;
          with.straggler_factor = factor;
          r = inner(with, ctx);
        } else {
          r = inner(s, ctx);
        }
        if (factor > 1) r.change_key += "|straggler";
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

  // ---- stragglers ----
  struct Window {
    int64_t step;
    double compute, step_time;  // means over the window; -1 = no timed step
  };

  void StartStraggler() {
    const JobInfo& job = plugin_->job();
    if (opt_.straggler_every <= 0 || job.world_size < 2) return;
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (!port || std::atoi(port) <= 0) {
      if (leader_) Log("cloudtune: straggler detection off: MASTER_PORT is not set");
      return;
    }
    try {
      c10d::TCPStoreOptions so;
      so.port = static_cast<uint16_t>(std::atoi(port));
      so.isServer = false;
      so.waitWorkers = false;
      so.timeout = std::chrono::seconds(5);  // connecting blocks Init at most this long
      store_ = c10::make_intrusive<c10d::TCPStore>(addr && *addr ? addr : "127.0.0.1", so);
      store_->setTimeout(std::chrono::seconds(30));  // a gather waits at most this long
    } catch (const std::exception& e) {
      if (leader_) Log(std::string("cloudtune: straggler detection off: c10d store: ") + e.what());
      return;
    }
    if (leader_) {
      service::StragglerOptions so;
      so.every_steps = opt_.straggler_every;
      detector_ = std::make_unique<service::StragglerDetector>(so);
    }
    straggler_on_ = true;
    strag_thread_ = std::thread([this] { StragglerLoop(); });
  }

  static std::string Key(int64_t step, int rank) {
    return "cloudtune/straggler/" + std::to_string(step) + "/" + std::to_string(rank);
  }

  // Background thread: publish this rank's windows; rank 0 also gathers and detects.
  void StragglerLoop() {
    const int rank = plugin_->job().rank, world = plugin_->job().world_size;
    bool logged = false;
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
        const std::string v = Num(w.compute) + "," + Num(w.step_time);
        store_->set(Key(w.step, rank), std::vector<uint8_t>(v.begin(), v.end()));
        if (!leader_) continue;
        service::RankWindow rw;
        rw.step = w.step;
        for (int r = 0; r < world; ++r) {
          const std::string key = Key(w.step, r);
          const std::vector<uint8_t> got = store_->get(key);  // waits (store timeout)
          store_->deleteKey(key);
          double c = -1, st = -1;
          std::sscanf(std::string(got.begin(), got.end()).c_str(), "%lf,%lf", &c, &st);
          rw.compute_time.push_back(c);
          rw.step_time.push_back(st);
        }
        const auto reports = detector_->AddWindow(rw);
        for (const auto& rep : reports) {
          plugin_->sidecar()->Write("straggler", w.step, rep.ToJson());
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
      } catch (const std::exception& e) {
        if (!logged && leader_) Log(std::string("cloudtune: straggler gather: ") + e.what());
        logged = true;
        std::lock_guard<std::mutex> lock(strag_mu_);
        if (strag_stop_) return;
      }
    }
  }

  void StopThreads() {
    // Order: nothing calls into the tuner or the sidecar after it is stopped.
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

  // Stragglers.
  bool straggler_on_ = false;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::unique_ptr<service::StragglerDetector> detector_;  // rank 0
  std::atomic<double> straggler_factor_{1.0};
  std::mutex strag_mu_;
  std::condition_variable strag_cv_;
  std::deque<Window> strag_queue_;
  bool strag_stop_ = false;
  std::thread strag_thread_;
  double win_step_ = 0, win_compute_ = 0;  // training thread
  int64_t win_n_ = 0;

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
    const bool stragglers = o.straggler_every > 0 && plugin->job().world_size > 1;
    if (!leader && o.preemption_url.empty() && !stragglers) return nullptr;
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

void OnlineStepTimes(Online* online, int64_t step, double step_time, double compute_time) {
  if (online) online->StepTimes(step, step_time, compute_time);
}

bool OnlineShouldCheckpoint(const Online* online) { return online && online->should_checkpoint(); }

bool Plugin::ShouldCheckpoint() const { return OnlineShouldCheckpoint(online_.get()); }

}  // namespace cloudtune::plugin
