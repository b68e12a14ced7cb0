#include "plugin/runtime/tuner.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <sstream>

#include "plugin/runtime/detail/thread.h"

namespace cloudtune::runtime {

namespace asio = boost::asio;

struct Tuner::Impl {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  asio::steady_timer timer{io};
  std::thread thread;
  std::mutex start_stop;  // serialises Start/Stop (never taken by Offer)
  bool started = false;
};

bool TunerOptions::IsValid(std::string* error) const {
  if (!(refit_seconds > 0) || !std::isfinite(refit_seconds)) {
    if (error) *error = "tuner refit_seconds must be a finite number > 0";
    return false;
  }
  if (!(final_refit_seconds >= 0) || !std::isfinite(final_refit_seconds)) {
    if (error) *error = "tuner final_refit_seconds must be a finite number >= 0";
    return false;
  }
  return true;
}

Tuner::Tuner(TunerOptions options, FitAndSearchFn fit, RecordSink sink, LogFn log)
    : options_(options),
      fit_(std::move(fit)),
      sink_(std::move(sink)),
      log_(std::move(log)),
      impl_(std::make_unique<Impl>()) {}

Tuner::~Tuner() { Stop(); }

void Tuner::Start() {
  std::lock_guard<std::mutex> lock(impl_->start_stop);
  if (impl_->started || stopped_) return;
  impl_->started = true;
  asio::post(impl_->io, [this] { ArmTimer(); });
  impl_->thread = std::thread([this] {
    detail::NameThisThread("tuner");
    try {
      impl_->io.run();
    } catch (...) {  // handlers catch their own errors; this is a last resort
    }
  });
}

void Tuner::Stop() {
  std::lock_guard<std::mutex> lock(impl_->start_stop);
  if (stopped_) return;
  if (impl_->started && options_.final_refit_seconds > 0 && published_.load() == 0 &&
      std::atomic_load(&slot_)) {
    // Runs after whatever the worker has queued; the worker stays up until it is done (or the
    // wait gives up, and the stop below drops it).
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    asio::post(impl_->io, [this, done] {
      if (published_.load() == 0) Refit("end");
      done->set_value();
    });
    finished.wait_for(std::chrono::duration<double>(options_.final_refit_seconds));
  }
  stopped_ = true;
  impl_->work.reset();
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void Tuner::ArmTimer() {
  if (stopped_) return;
  impl_->timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.refit_seconds)));
  impl_->timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    Refit("timer");
    ArmTimer();
  });
}

void Tuner::Offer(std::shared_ptr<const Snapshot> snapshot) {
  if (!snapshot) return;
  snapshots_.fetch_add(1, std::memory_order_relaxed);
  const bool changed_config = options_.refit_on_config_change;
  std::shared_ptr<const Snapshot> previous = std::atomic_exchange(&slot_, snapshot);
  generation_.fetch_add(1, std::memory_order_release);
  const bool changed = changed_config && previous && !(previous->current == snapshot->current);
  const bool first = options_.refit_until_published && published_.load() == 0;
  if ((changed || first) && !stopped_ && !wake_pending_.exchange(true)) {
    // Rare (configuration changes, the first snapshots); the post is a short critical section
    // inside Asio.
    asio::post(impl_->io, [this, changed] {
      wake_pending_ = false;
      Refit(changed ? "config_change" : "first");
    });
  }
  // `previous` is released here: freeing the old profile is O(configurations), not O(steps).
}

void Tuner::RequestRefit(std::string reason) {
  if (stopped_) return;
  asio::post(impl_->io, [this, reason = std::move(reason)] { Refit(reason); });
}

void Tuner::Resume(std::shared_ptr<const Snapshot> snapshot, std::string reason) {
  if (!snapshot || stopped_) return;
  snapshots_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_store(&slot_, std::move(snapshot));
  generation_.fetch_add(1, std::memory_order_release);
  wake_pending_ = true;
  asio::post(impl_->io, [this, reason = std::move(reason)] {
    wake_pending_ = false;
    Refit(reason);
  });
}

std::shared_ptr<const nlohmann::json> Tuner::Latest() const { return std::atomic_load(&latest_); }

std::shared_ptr<const Snapshot> Tuner::LatestSnapshot() const { return std::atomic_load(&slot_); }

TunerStats Tuner::Stats() const {
  TunerStats s;
  s.snapshots = snapshots_.load(std::memory_order_relaxed);
  s.refits = refits_.load();
  s.fit_errors = fit_errors_.load();
  s.published = published_.load();
  s.skipped = skipped_.load();
  return s;
}

void Tuner::Refit(const std::string& trigger) {
  if (stopped_) return;
  const std::uint64_t gen = generation_.load(std::memory_order_acquire);
  std::shared_ptr<const Snapshot> snap = std::atomic_load(&slot_);
  if (!snap) return;
  if (trigger == "timer" && gen == fitted_generation_) {
    skipped_.fetch_add(1);
    return;
  }
  fitted_generation_ = gen;
  RefitContext ctx{trigger, refits_.load() + fit_errors_.load() + 1};
  TunerResult res;
  // Counts the outcome and logs its first occurrence of each kind.
  auto fail = [this](std::atomic<std::uint64_t>& counter, bool* logged, const std::string& line) {
    counter.fetch_add(1);
    if (!*logged && log_) log_(line);
    *logged = true;
  };
  try {
    if (!fit_) throw std::runtime_error("no fit-and-search function");
    res = fit_(*snap, ctx);
  } catch (const TargetReached& e) {
    return fail(skipped_, &logged_reached_, std::string("cloudtune: ") + e.what());
  } catch (const NotReady& e) {
    return fail(
        fit_errors_, &logged_waiting_,
        std::string("cloudtune: waiting for data before the first recommendation: ") + e.what());
  } catch (const std::exception& e) {
    return fail(fit_errors_, &logged_error_,
                std::string("cloudtune: refit failed (step ") + std::to_string(snap->step) +
                    "): " + e.what() + " (further refit errors are counted, not logged)");
  } catch (...) {
    return fail(fit_errors_, &logged_error_,
                "cloudtune: refit failed with an unknown error (further errors are not logged)");
  }
  refits_.fetch_add(1);
  std::atomic_store(&latest_,
                    std::make_shared<const nlohmann::json>(std::move(res.recommendation)));
  if (have_published_ && res.change_key == last_change_key_) return;
  have_published_ = true;
  last_change_key_ = res.change_key;
  published_.fetch_add(1);
  try {
    if (sink_) {
      const auto latest = std::atomic_load(&latest_);
      nlohmann::json record = latest->is_object() ? *latest : nlohmann::json{{"value", *latest}};
      record["step"] = snap->step;
      record["trigger"] = trigger;
      sink_("recommendation", record);
    }
    if (log_ && !res.log_line.empty()) log_(res.log_line);
  } catch (const std::exception& e) {
    if (!logged_error_ && log_) {
      logged_error_ = true;
      log_(std::string("cloudtune: writing the recommendation failed: ") + e.what());
    }
  } catch (...) {
  }
}

}  // namespace cloudtune::runtime

// ---- what the HTTP endpoint serves --------------------------------------------------------------

namespace cloudtune::runtime {
namespace {

nlohmann::json KeyJson(const core::ConfigKey& k) {
  return {{"num_nodes", k.num_nodes},         {"num_replicas", k.num_replicas},
          {"local_bsz", k.local_bsz},         {"accum_steps", k.accum_steps},
          {"instance_type", k.instance_type}, {"global_batch", k.global_batch()}};
}

double NumberAt(const nlohmann::json& j, const char* a, const char* b) {
  if (!j.is_object() || !j.contains(a) || !j[a].is_object() || !j[a].contains(b) ||
      !j[a][b].is_number())
    return MetricsSnapshot::kUnknown;
  return j[a][b].get<double>();
}

}  // namespace

MetricsSnapshot TunerMetrics(const Tuner& tuner) {
  MetricsSnapshot m;
  const TunerStats st = tuner.Stats();
  m.refits_total = static_cast<double>(st.refits);
  m.fit_errors_total = static_cast<double>(st.fit_errors);
  m.recommendations_total = static_cast<double>(st.published);
  m.snapshots_total = static_cast<double>(st.snapshots);
  const auto snap = tuner.LatestSnapshot();
  double b0 = MetricsSnapshot::kUnknown;
  if (snap) {
    const Snapshot& s = *snap;
    m.step = static_cast<double>(s.step);
    m.progress = s.progress;
    m.num_nodes = s.current.num_nodes;
    m.num_replicas = s.current.num_replicas;
    m.global_batch = static_cast<double>(s.current.global_batch());
    m.straggler_factor = s.straggler_factor;
    for (const auto& meas : s.profile) {
      if (!(meas.key == s.current) || !(meas.step_time > 0)) continue;
      m.step_time_seconds = meas.step_time;
      m.sync_seconds = meas.sync_time;
      m.compute_seconds = meas.compute_time();
      m.throughput = meas.throughput();
    }
    if (s.noise.grad_sqr > 0 && s.noise.base_batch > 0) {
      b0 = s.noise.base_batch;
      m.grad_sqr = s.noise.grad_sqr;
      m.grad_var = s.noise.grad_var;
      m.noise_scale = s.noise.base_batch * s.noise.grad_var / s.noise.grad_sqr;
      m.statistical_efficiency =
          estimator::Efficiency(s.noise, static_cast<double>(s.current.global_batch()));
      if (std::isfinite(m.throughput)) m.goodput = m.throughput * m.statistical_efficiency;
    }
  }
  if (const auto rec = tuner.Latest()) {
    const nlohmann::json& j = *rec;
    m.cost_rate_usd_per_hour = NumberAt(j, "current", "price_per_hour");
    m.predicted_cost_rate_usd_per_hour = NumberAt(j, "proposed", "price_per_hour");
    m.predicted_throughput = NumberAt(j, "proposed", "throughput");
    // The search's goodput is B0-steps per second; × B0 gives samples/s like the measured one.
    const double g = NumberAt(j, "proposed", "goodput");
    if (std::isfinite(g) && std::isfinite(b0)) m.predicted_goodput = g * b0;
    const bool time = j.is_object() && j.value("objective", "") == "time";
    const double now = NumberAt(j, "current", time ? "hours" : "cost_usd");
    const double next = NumberAt(j, "proposed", time ? "hours" : "cost_usd");
    if (std::isfinite(now) && std::isfinite(next) && now > 0) m.predicted_gain = (now - next) / now;
  }
  return m;
}

std::string ProfileJson(const Snapshot& s) {
  nlohmann::json confs = nlohmann::json::array();
  for (const auto& m : s.profile) {
    nlohmann::json e = KeyJson(m.key);
    e["step_time"] = m.step_time;
    e["sync_time"] = m.sync_time;
    e["compute_time"] = m.compute_time();
    e["throughput"] = m.step_time > 0 ? m.throughput() : 0.0;
    e["rows"] = m.rows;
    e["max_gpus_per_node"] = m.max_gpus_per_node;
    confs.push_back(std::move(e));
  }
  nlohmann::json noise = {{"grad_sqr", s.noise.grad_sqr},
                          {"grad_var", s.noise.grad_var},
                          {"base_batch", s.noise.base_batch},
                          {"biased", s.noise.biased}};
  noise["noise_scale"] =
      s.noise.grad_sqr > 0
          ? nlohmann::json(s.noise.base_batch * s.noise.grad_var / s.noise.grad_sqr)
          : nlohmann::json();
  return nlohmann::json{{"schema", "cloudtune.profile/1"},
                        {"step", s.step},
                        {"progress", s.progress},
                        {"current", KeyJson(s.current)},
                        {"noise", std::move(noise)},
                        {"straggler_factor", s.straggler_factor},
                        {"configurations", std::move(confs)}}
      .dump();
}

std::string ProfileCsv(const Snapshot& s) {
  std::ostringstream out;
  estimator::WriteTrace(out, s.profile);
  return out.str();
}

HttpProviders MakeHttpProviders(const Tuner& tuner, std::function<void(MetricsSnapshot*)> extra) {
  HttpProviders p;
  const Tuner* t = &tuner;
  p.recommendation = [t] {
    const auto rec = t->Latest();
    return rec ? rec->dump() : std::string();
  };
  p.profile_json = [t] {
    const auto s = t->LatestSnapshot();
    return s ? ProfileJson(*s)
             : std::string("{\"schema\":\"cloudtune.profile/1\",\"configurations\":[]}");
  };
  p.profile_csv = [t] {
    const auto s = t->LatestSnapshot();
    return s ? ProfileCsv(*s) : ProfileCsv(Snapshot{});
  };
  p.metrics = [t, extra = std::move(extra)] {
    MetricsSnapshot m = TunerMetrics(*t);
    if (extra) extra(&m);
    return RenderPrometheus(m);
  };
  return p;
}

}  // namespace cloudtune::runtime
