// The tuner runtime: the torch-free half of the plugin, and the one object that the live job,
// `cloudtune recommend` and the replay's cloudtune policy all construct. It turns what a job has
// measured (core::Snapshot) into recommendations with the one fit-and-search
// (plugin/runtime/fit_and_search.h), so the three decide alike.
//
// A live job (plugin/torch/ adapts the hooks and the job's c10d store to it) calls Start(); then
//   - rank 0: a background Tuner (Boost.Asio executor) fed by Observe() every measurement interval
//     (training thread, O(configurations)); it refits every CLOUDTUNE_REFIT_SECONDS and writes each
//     new `recommendation` record (with the "inputs" it was computed from) plus one log line;
//     progress in B0-steps is counted here, restored rows are merged into every snapshot;
//   - rank 0: the HTTP endpoint when CLOUDTUNE_HTTP is set;
//   - rank 0: saved state (CLOUDTUNE_STATE): restored at Start when the file exists or the job was
//     restarted (TORCHELASTIC_RESTART_COUNT > 0; a corrupt or foreign file is reported once and
//     ignored), saved (atomically) on each refit and at Stop;
//   - every rank: per-rank step/compute times gathered to rank 0 through the job's store every
//     CLOUDTUNE_STRAGGLER_EVERY steps (StepTimes) when world_size > 1;
//   - every rank: the preemption watcher when CLOUDTUNE_PREEMPTION_URL is set; a notice raises
//     ShouldCheckpoint() and on rank 0 writes a `preemption` record and re-plans for the remaining
//     fleet.
// The CLI and the replay call Decide() instead, synchronously, with snapshots they build.
// Nothing here throws into the training loop; a piece that cannot start logs one line and the rest
// goes on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "estimator/core/env.h"
#include "estimator/core/types.h"
#include "plugin/runtime/cloud.h"
#include "plugin/runtime/fit_and_search.h"
#include "plugin/runtime/history.h"
#include "plugin/runtime/options.h"
#include "search/catalog.h"

namespace cloudtune::runtime {

class Tuner;
class HttpServer;
class PreemptionWatcher;
class StragglerDetector;

// The job's own cross-rank key-value store (the c10d store the process group rendezvoused on;
// plugin/torch/ adapts it). Called from one background thread per rank.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // Waits for the key up to the store's timeout; throws on timeout or a broken connection.
  virtual std::string Get(const std::string& key) = 0;
  virtual void Delete(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (0 when absent) and returns the new value.
  virtual long long Add(const std::string& key, long long delta) = 0;
};

// Whether the plugin may touch what the ranks share (the all-reduce buffer's extra element, the
// store), agreed by all `world_size` ranks at start-up: each rank says whether it can be on
// (`local_ok`); all are on only if every rank is, and every rank learns the same answer. A rank
// that does not arrive within `timeout_seconds` (it failed before reaching this point) turns
// everybody off. `prefix` makes the keys unique to this start of the job (run id, restart count).
// Returns the agreed answer; *why says what turned it off ("" when on).
bool AgreeAcrossRanks(KeyValueStore& store, const std::string& prefix, int world_size,
                      bool local_ok, double timeout_seconds, std::string* why);

// What the runtime is told about the job and where its outputs go.
struct RuntimeSetup {
  Options options;     // CLOUDTUNE_* settings (read once, Options::FromEnv)
  int rank = 0;        // this process's rank
  int world_size = 1;  // replicas
  int num_nodes = 1;   // machines
  // Find the instance type at Start (CLOUDTUNE_INSTANCE_TYPE was not given): the cloud's metadata,
  // else `gpu_name` mapped to the catalog. Rank 0 only.
  bool detect_instance = false;
  std::string gpu_name;    // the CUDA device's name ("" = not on a GPU)
  core::LaunchEnv launch;  // restart count, store address (core::LaunchEnv::Read)
  // Search knobs the environment does not set (the CLI's flags, a replay scenario's traced
  // configurations), applied on top of SearchOptionsFrom(options).
  std::function<void(FitAndSearchOptions*)> customize;
  // Records ("recommendation", "preemption", "straggler") for rank 0's sidecar; empty = none.
  std::function<void(const std::string& kind, long long step, const nlohmann::json& record)> record;
  // One human line per event; empty = stderr (nothing when options.log_level is "error").
  std::function<void(const std::string& line)> log;
  // The cross-rank store for the straggler gather (null = no straggler detection).
  std::shared_ptr<KeyValueStore> store;
};

class Runtime {
 public:
  // Cheap: reads nothing and starts no thread. Throws cloudtune::InputError when the catalog named
  // by the options cannot be read.
  explicit Runtime(RuntimeSetup setup);
  ~Runtime();  // Stop()
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The one fit-and-search, synchronously, on `s` (whose progress and history the caller set), as
  // the background tuner runs it (preemption and straggler context included). Throws on an empty
  // profile, no noise estimate yet, or an invalid request (e.g. no target progress).
  TunerResult Decide(const core::Snapshot& s, const std::string& trigger) const;
  // The search options in force (after `customize`); the CLI prints them, tests compare them.
  const FitAndSearchOptions& search_options() const { return search_; }
  const search::Catalog& catalog() const { return catalog_; }
  // Why the catalog named by the options could not be read ("" = it was); Decide() refuses then.
  const std::string& catalog_error() const { return catalog_error_; }

  // ---- a live job ----
  // Starts the pieces this rank runs (see the file comment): on rank 0 first finds where the job
  // runs (at most about 200 ms) and logs one line saying what is known and what would unlock more.
  // Never throws.
  void Start();
  // Where the job runs, as found at Start (or as the options say).
  const CloudInstance& instance() const { return instance_; }
  // The instance type and purchase the search prices the current configuration as.
  const std::string& instance_type() const { return search_.instance_type; }
  core::Purchase purchase() const { return search_.purchase; }
  bool prices_known() const { return !pseudo_type_; }
  // Whether Start restored the tuner's saved state (CLOUDTUNE_STATE) on this rank.
  bool restored() const { return restored_; }
  // What counts as finished, from the training loop (overrides the options' target). Any thread.
  void SetTarget(const Target& target);
  // Training thread, rank 0, once per measurement interval: what the plugin measured (its step,
  // configuration, profile and noise since this process started). O(configurations).
  void Observe(const core::Snapshot& measured);
  // Training thread, every rank, once per optimizer step: the step's times in seconds (< 0 = not
  // timed). O(1).
  void StepTimes(long long step, double step_time, double compute_time);
  // Training thread: stops everything (joins the threads) and saves the final state; `last` is
  // what the plugin measured at the end (may be null). Idempotent.
  void Stop(const core::Snapshot* last = nullptr);
  // Whether a preemption notice was seen (lock-free).
  bool ShouldCheckpoint() const;
  // Training thread, rank 0, once (later calls are ignored): the model's signature, from the
  // gradient shapes the hooks see. Turns the job history on (CLOUDTUNE_HISTORY): the next refit
  // (worker thread) looks up the newest job with this signature and, when one is found, decides
  // on this job's measurements over that job's (WarmSnapshot); Stop records this job. O(1).
  void SetModelSignature(const ModelSignature& signature);
  // The warm-start prior the refits use (null: none found, not looked up yet, or history off).
  std::shared_ptr<const WarmPrior> warm_prior() const { return std::atomic_load(&warm_); }
  // The latest published recommendation (null before the first), the latest snapshot offered.
  std::shared_ptr<const nlohmann::json> Latest() const;
  std::shared_ptr<const core::Snapshot> LatestSnapshot() const;
  const Tuner* tuner() const { return tuner_.get(); }
  // In-process batch (the examples' --adaptive-batch): what the latest recommendation lets the job
  // take up without a restart (search::InProcessBatch, the rule the replay's job follows between
  // its decisions), provided that recommendation was decided from the configuration the job runs
  // now (`running`: nodes, replicas, local batch, accumulation; a decision about an earlier batch
  // is never acted on). The result may equal `running` (keep). nullopt when there is no
  // recommendation yet, it was decided from another configuration, or it proposes other hardware,
  // a measurement or a mixed cluster. *why (may be null) gets the recommendation's reason, or why
  // there is nothing to take up. Lock-free; never fits: safe on the training thread.
  std::optional<search::Config> InProcessBatch(const core::ConfigKey& running,
                                               std::string* why = nullptr) const;

 private:
  struct Window {
    long long step;
    double compute, step_time;  // means over the window; -1 = no timed step
  };
  void Log(const std::string& line) const;
  void Record(const std::string& kind, long long step, const nlohmann::json& rec) const;
  void RestoreState();
  void Save(const core::Snapshot& s, const nlohmann::json* recommendation);
  void SaveFinal(const core::Snapshot* last);
  std::shared_ptr<const core::Snapshot> Convert(const core::Snapshot& measured);
  TunerResult Refit(const core::Snapshot& s, const RefitContext& c);
  void StartTuner();
  void StartHttp();
  void StartPreemption();
  void StartStraggler();
  void StragglerLoop();
  void GatherWindow(const Window& w);
  void StopThreads();
  void UsePseudoType();
  void FindInstance();
  std::string StartLine() const;
  void CountSpending(const core::Snapshot& p, core::Snapshot* s);
  std::string HistoryPath() const;
  void LookUpHistory();  // worker thread, once
  // Removes the rows on instance types the catalog does not know; returns their names ("" = none).
  std::string DropUnknownTypes(std::vector<core::Measurement>* rows) const;
  void RecordHistory(const core::Snapshot* last);

  RuntimeSetup setup_;
  const Options& opt_;
  bool leader_ = false;
  bool quiet_ = false;
  search::Catalog catalog_;
  FitAndSearchOptions search_;
  std::string search_error_;                // why the options cannot search ("" = they can)
  std::string catalog_error_;               // why the catalog could not be read
  std::string options_error_;               // why the options could not be mapped to a search
  std::vector<std::string> allowed_types_;  // CLOUDTUNE_CLOUDS and _GPUS ({} = every type)
  bool pseudo_type_ = false;  // the instance type is not in the catalog: prices unknown
  CloudInstance instance_;
  mutable std::mutex target_mu_;
  std::optional<Target> target_;  // from SetTarget
  std::atomic<bool> started_{false}, stopped_{false};
  std::atomic<bool> preempted_{false};  // a notice was seen (rank 0)
  std::unique_ptr<Tuner> tuner_;
  std::shared_ptr<const search::Recommendation> decision_;  // the latest; atomic_* access only
  // The configuration the last refit asked to measure (null: none); atomic_* access only.
  std::shared_ptr<const core::ConfigKey> measuring_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<PreemptionWatcher> preemption_;

  // Stragglers.
  bool straggler_on_ = false;
  std::unique_ptr<StragglerDetector> detector_;  // rank 0
  std::atomic<double> straggler_factor_{1.0};
  std::mutex strag_mu_;
  std::condition_variable strag_cv_;
  std::deque<Window> strag_queue_;
  bool strag_stop_ = false;
  std::thread strag_thread_;
  double win_step_ = 0, win_compute_ = 0;  // training thread
  long long win_n_ = 0;
  bool gather_error_logged_ = false;

  // Job history.
  std::shared_ptr<const ModelSignature> signature_;  // atomic_* access only
  std::shared_ptr<const WarmPrior> warm_;            // atomic_* access only
  bool history_looked_up_ = false;                   // worker thread
  bool history_error_logged_ = false;

  // Saved state.
  std::mutex save_mu_;
  bool save_error_logged_ = false;
  bool restored_ = false;
  core::Snapshot base_;  // the restored snapshot (empty when none)

  // Training-thread bookkeeping of Convert().
  double last_elapsed_ = 0;
  double spent_usd_ = 0, explore_usd_ = 0, explore_s_ = 0;
  // Spot node-hours and revocations of this process per type (training thread); a revocation
  // notice (preempted_) counts once.
  std::map<std::string, core::SpotExposure> exposure_;
  bool notice_counted_ = false;
  long long last_step_ = 0;
  double progress_ = 0;  // B0-steps made by this process
  std::vector<core::NoiseObservation> history_;
  std::atomic<long long> step_{0};  // latest step offered (for records written by other threads)
};

// Restored rows and live rows of the same configuration: row-weighted means.
std::vector<core::Measurement> MergeProfiles(const std::vector<core::Measurement>& a,
                                             const std::vector<core::Measurement>& b);

}  // namespace cloudtune::runtime
