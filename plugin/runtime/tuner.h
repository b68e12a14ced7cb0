// The online tuner's background executor (rank 0). The training thread hands over a Snapshot of
// what it measured in O(1) without blocking (an atomic shared_ptr swap) and reads the latest
// recommendation without blocking (an atomic shared_ptr load). One worker thread (Boost.Asio
// io_context) refits the models and runs the search every `refit_seconds`, immediately when the
// configuration changes, and on request (e.g. a preemption notice); it publishes the result, and
// when the proposal changes writes one `recommendation` record to the sink and one log line.
//
// The fit-and-search step is a std::function (FitAndSearchFn) so the executor is testable with a
// fake; runtime::Runtime passes the real one (plugin/runtime/fit_and_search.h). Errors in it never
// escape the worker: the first one is logged, all are counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "plugin/runtime/fit_and_search.h"
#include "plugin/runtime/http_server.h"
#include "plugin/runtime/metrics.h"

namespace cloudtune::runtime {

// Receives sidecar records: kind ("recommendation") and the record (maps onto the sidecar's Write).
using RecordSink = std::function<void(const std::string& kind, const nlohmann::json& record)>;
using LogFn = std::function<void(const std::string& line)>;

struct TunerOptions {
  // Seconds between periodic refits (CLOUDTUNE_REFIT_SECONDS). > 0. A periodic refit is skipped
  // when no new snapshot arrived since the last one.
  double refit_seconds = 30;
  // Refit as soon as a snapshot shows a different configuration than the previous one.
  bool refit_on_config_change = true;
  // Until the first recommendation is published, refit at every snapshot (so a job gets its first
  // recommendation as soon as the data allows, not a timer period later).
  bool refit_until_published = false;
  // At Stop, when nothing was published yet and a snapshot exists, refit once more ("end") and wait
  // for it at most this many seconds, so that a short job still leaves a recommendation. 0 = never.
  // >= 0.
  double final_refit_seconds = 5;
  bool IsValid(std::string* error) const;
};

struct TunerStats {
  std::uint64_t snapshots = 0;   // Offer() and Resume() calls
  std::uint64_t refits = 0;      // successful fit-and-search runs
  std::uint64_t fit_errors = 0;  // failed ones
  std::uint64_t published = 0;   // changed recommendations (records written)
  std::uint64_t skipped = 0;     // refits skipped: no new data, or the target is reached
};

class Tuner {
 public:
  // `fit` is required; `sink` and `log` may be empty.
  Tuner(TunerOptions options, FitAndSearchFn fit, RecordSink sink = {}, LogFn log = {});
  ~Tuner();  // Stop()
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  // Starts the worker thread. Offer() before Start() is fine (the snapshot waits).
  void Start();
  // Stops the timer and joins the worker (waits for a fit in progress to finish; fits are
  // bounded). Idempotent; later Offer()/RequestRefit() calls are harmless no-ops for the worker.
  void Stop();

  // Training thread: replaces the latest snapshot. O(1): one std::atomic_exchange of a shared_ptr
  // (libstdc++ guards it with a tiny spinlock held for a pointer swap, never during a fit) and a
  // relaxed counter; the worker is never waited for. The replaced snapshot is released here.
  // When the configuration differs from the previous snapshot's, a refit is posted (rare).
  // Call from one thread (the training thread).
  void Offer(std::shared_ptr<const Snapshot> snapshot);
  void Offer(Snapshot snapshot) { Offer(std::make_shared<const Snapshot>(std::move(snapshot))); }

  // Any thread: refit now (if a snapshot exists) with RefitContext::trigger = reason.
  void RequestRefit(std::string reason);
  // Before the job's first Offer(): offers a restarted job's restored snapshot and refits on it
  // at once with RefitContext::trigger = reason ("restored"). Snapshots offered while that refit
  // waits post no other; until a recommendation is published, later ones refit as usual.
  void Resume(std::shared_ptr<const Snapshot> snapshot, std::string reason);

  // Any thread, non-blocking: the latest published recommendation (null before the first).
  std::shared_ptr<const nlohmann::json> Latest() const;
  // Any thread: the latest snapshot offered (null before the first).
  std::shared_ptr<const Snapshot> LatestSnapshot() const;
  TunerStats Stats() const;

 private:
  struct Impl;
  void Refit(const std::string& trigger);
  void ArmTimer();

  TunerOptions options_;
  FitAndSearchFn fit_;
  RecordSink sink_;
  LogFn log_;
  std::unique_ptr<Impl> impl_;  // io_context, timer, thread

  std::shared_ptr<const Snapshot> slot_;          // atomic_* access only
  std::shared_ptr<const nlohmann::json> latest_;  // atomic_* access only
  std::atomic<std::uint64_t> generation_{0};      // bumped by Offer
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<std::uint64_t> snapshots_{0}, refits_{0}, fit_errors_{0}, published_{0}, skipped_{0};

  // Worker-only state.
  std::uint64_t fitted_generation_ = 0;
  bool have_published_ = false;
  bool logged_error_ = false;
  bool logged_waiting_ = false;
  bool logged_reached_ = false;
  std::string last_change_key_;
};

// ---- what the HTTP endpoint serves --------------------------------------------------------------

// /metrics values from the tuner's latest snapshot, recommendation and counters: the current
// configuration's measured step/compute/sync time and throughput (the profile entry of
// snapshot.current), efficiency and goodput from the noise state, the current and proposed cost
// rates, predicted throughput/goodput (samples/s) and gain of the latest recommendation.
MetricsSnapshot TunerMetrics(const Tuner& tuner);
// GET /v1/profile bodies: {"schema":"cloudtune.profile/1","step","progress","current",
// "noise":{…,"noise_scale"},"configurations":[{…key…,"step_time","sync_time","rows",…}]} and the
// trace CSV (estimator::WriteTrace), or "" before the first snapshot.
std::string ProfileJson(const Snapshot& s);
std::string ProfileCsv(const Snapshot& s);
// Providers reading only the tuner's atomics. `extra` may add values to the metrics (e.g. the
// preemption flag, sidecar counters). The tuner must outlive the server.
HttpProviders MakeHttpProviders(const Tuner& tuner,
                                std::function<void(MetricsSnapshot*)> extra = {});

}  // namespace cloudtune::runtime
