// The torch adapter: the in-loop plugin of one process (rank). It times steps and reduces
// gradient norms (hooks/), keeps the measured profile, writes the sidecar's "start",
// "measurement" and "end" records and the profile CSV, and hands what it measured to the tuner
// runtime (plugin/runtime/runtime.h), which makes every decision. Training loops use the free
// functions of include/cloudtune/cloudtune.h (one global Plugin); tests and the benchmark may
// create their own instances.
//
// Every method is noexcept in effect: an internal error is logged once and switches the instance
// off; training goes on. With Options::enabled false every method returns at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cloudtune/cloudtune.h"
#include "estimator/core/env.h"
#include "estimator/core/types.h"
#include "hooks/cuda_timing.h"
#include "hooks/gns.h"
#include "hooks/step_timer.h"
#include "plugin/runtime/options.h"
#include "plugin/runtime/sidecar.h"

namespace cloudtune::runtime {
class Runtime;        // plugin/runtime/runtime.h
class KeyValueStore;  // plugin/runtime/runtime.h
struct Target;        // plugin/runtime/fit_and_search.h
}  // namespace cloudtune::runtime

namespace cloudtune::plugin {

using cloudtune::JobInfo;
using core::Snapshot;
// Called on the training thread (rank 0) with what was measured every CLOUDTUNE_MEASURE_EVERY
// steps; must return at once. A test seam: the runtime is fed directly.
using Observer = std::function<void(std::shared_ptr<const core::Snapshot>)>;

class Plugin {
 public:
  // `launch`: what the launcher says (RANK, LOCAL_WORLD_SIZE, MASTER_PORT …), read once.
  explicit Plugin(runtime::Options options, core::LaunchEnv launch = core::LaunchEnv::Read());
  ~Plugin();  // Finish()

  // Starts measuring: on rank 0 opens the sidecar (failure: one log line, plugin off) and writes
  // the "start" record. Returns whether the plugin is on.
  bool Start(const JobInfo& job);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // --- the training-loop hooks (training thread) ---
  void StepBegin();
  void SyncBegin();
  void SyncEnd();
  // One accumulation micro-step's local gradients (mean over its local batch), before the
  // all-reduce. Returns the value to put in the extra element of the all-reduce buffer: the sum of
  // the micro-step squared norms of this step so far (0 when off).
  double GradsLocal(const std::vector<at::Tensor>& grads);
  // The averaged gradients after the all-reduce, and the extra element after it: the MEAN over
  // replicas of the GradsLocal() values (sum-reduce then divide by world size, like the gradients).
  void GradsReduced(const std::vector<at::Tensor>& grads, double reduced_slot);
  // The same protocol with the slot as a tensor that stays on the gradients' device (CUDA: no
  // host read; the values are copied back asynchronously and folded in a step or two later).
  // GradsLocalTensor returns a 0-dim float64 tensor (zero when off).
  at::Tensor GradsLocalTensor(const std::vector<at::Tensor>& grads);
  void GradsReducedTensor(const std::vector<at::Tensor>& grads, const at::Tensor& reduced_slot);
  // Replicas with different local batches (a mixed cluster balancing its step times): the means
  // over replicas of 1/local_bsz and of local_bsz (all-reduced like the gradients), for the step
  // whose GradsReduced comes next. The gradients must then be combined weighted by samples
  // (each replica scales its gradient by local_bsz / mean before the all-reduce average) and
  // StepEnd be given the mean local batch. Not called: every replica has StepEnd's local_bsz.
  void ReplicaBatches(double mean_inv_batch, double mean_batch);
  // Ends the optimizer step: samples per replica per micro-step and the micro-steps it had.
  void StepEnd(int64_t local_bsz, int64_t micro_steps = 1);
  // What counts as finished (from the training loop; overrides CLOUDTUNE_TARGET_*).
  void SetTarget(const runtime::Target& target);
  // The model's trainable tensors (or its gradients), once: their shapes are the model's signature
  // for the job history (runtime::ModelSignature). GradsLocal calls it with the first non-empty
  // gradients; the Python path calls it from attach() with the parameters. Later calls are no-ops.
  void NoteModel(const std::vector<at::Tensor>& tensors);
  // Whether the job should checkpoint now: a spot preemption notice was seen.
  bool ShouldCheckpoint() const;
  // Writes the "end" record and the final profile, stops the writer. Idempotent.
  void Finish();

  // --- for tests, the benchmark and the evaluation harness of the examples ---
  void SetObserver(Observer observer);
  runtime::Sidecar* sidecar() { return &sidecar_; }  // for other record writers (rank 0)
  const runtime::Options& options() const { return opt_; }
  const JobInfo& job() const { return job_; }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  // SIGTERM (any thread, once): the "end" record marked with the signal, the profile, and a flush
  // of the sidecar. Touches only what is safe beside the training thread.
  void EndOnSignal(const char* signal_name);
  hooks::GnsState noise() const { return gns_.State(); }
  std::vector<core::Measurement> profile() const;
  // What was measured so far, as handed to the runtime.
  core::Snapshot Measured() const;
  const runtime::Runtime* tuner_runtime() const { return runtime_.get(); }

 private:
  struct ConfigStats {  // running sums of one configuration's post-warm-up steps
    double step_sum = 0, sync_sum = 0;
    int64_t rows = 0;
  };
  void Fail(const char* where, const std::string& what);
  void Log(const std::string& line) const;
  void EndInterval();
  // Whether the open record has spanned measure_seconds with kMinRecordSteps timed steps.
  bool RecordIsLongEnough() const;
  void AddTiming(const hooks::StepSample& s);
  core::ConfigKey KeyFor(int64_t local_bsz, int64_t micro_steps) const;
  nlohmann::json ConfigJson(const core::ConfigKey& k) const;
  void WriteProfile();

  void StartRuntime(std::shared_ptr<runtime::KeyValueStore> store);
  std::shared_ptr<runtime::KeyValueStore> ConnectStore();
  bool Agree(runtime::KeyValueStore* store, bool local_ok);
  void WriteStartRecord();
  std::string GpuName() const;

  runtime::Options opt_;
  core::LaunchEnv launch_;
  std::string store_error_;  // why the job's store could not be reached
  JobInfo job_;
  std::atomic<bool> enabled_{false};
  bool leader_ = false;       // rank 0: measures, writes
  bool noted_model_ = false;  // NoteModel ran
  std::atomic<bool> finished_{false};
  runtime::Sidecar sidecar_;
  hooks::StepTimer timer_;
  hooks::GnsEstimator gns_;
  Observer observer_;

  std::atomic<int64_t> step_{0};
  std::chrono::steady_clock::time_point started_{};
  // Current configuration and warm-up.
  bool have_config_ = false;
  core::ConfigKey config_;
  int64_t warmup_left_ = 0;
  // Gradient bookkeeping of the step in flight.
  double local_sum_ = 0;
  int64_t micro_seen_ = 0;
  bool have_pending_ = false;
  hooks::GnsSample pending_;
  double replica_inv_batch_ = 0, replica_mean_batch_ = 0;  // ReplicaBatches() for the next step
  // The last step's replicas had different local batches (ReplicaBatches: mean 1/b times mean b
  // above 1): a mixed cluster runs in place of the configuration the job reports
  // (core::Snapshot::mixed_cluster).
  bool uneven_batches_ = false;
#ifdef CLOUDTUNE_WITH_CUDA
  bool use_cuda_ = false;
  hooks::CudaStepTimer cuda_timer_;
  hooks::AsyncScalars cuda_scalars_;  // {local_sqr, total_sqr} on their way to the host
  hooks::GnsSample cuda_sample_;      // count / micro_batch of the values in flight
  at::Tensor cuda_local_;             // device running sum of micro-step squared norms
#endif
  std::vector<float> prev_grads_;  // single-replica consecutive mode
  double prev_sqr_ = 0;
  bool prev_valid_ = false;
  // The interval since the last measurement record.
  hooks::RunningStats step_stats_, sync_stats_, compute_stats_;
  double interval_samples_ = 0;
  int64_t interval_begin_step_ = 0;
  std::chrono::steady_clock::time_point interval_begin_time_{};  // for measure_seconds
  // Profile, per configuration.
  mutable std::mutex profile_mu_;
  std::map<core::ConfigKey, ConfigStats> configs_;
  // The tuner runtime: background tuner, HTTP endpoint, preemption watcher, stragglers, state.
  std::unique_ptr<runtime::Runtime> runtime_;
};

// The process's plugin behind include/cloudtune/cloudtune.h (null before Init). In-tree users only
// (the examples' evaluation harness, tests).
Plugin* Instance();

}  // namespace cloudtune::plugin
