// The in-loop plugin: step timing, gradient noise, profile and sidecar, for one process (rank).
// Training loops use the free functions of plugin/cloudtune.h (one global Plugin); tests and the
// benchmark may create their own instances.
//
// Every method is noexcept in effect: an internal error is logged once and switches the instance
// off; training goes on. With Options::enabled false every method returns at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hooks/cuda_timing.h"
#include "hooks/gns.h"
#include "hooks/step_timer.h"
#include "plugin/service/options.h"
#include "plugin/service/sidecar.h"
#include "plugin/snapshot.h"

namespace cloudtune::plugin {

class Online;  // plugin/online.h

// What the training job is.
struct JobInfo {
  int rank = 0;         // this process's rank in the data-parallel group
  int world_size = 1;   // replicas
  int num_nodes = 0;    // machines; 0 = world_size / $LOCAL_WORLD_SIZE, or 1 when unset
  int local_bsz = 0;    // initial samples per replica per micro-step (0 = unknown yet)
  int micro_steps = 1;  // initial accumulation micro-steps per optimizer step
  // The step runs on a CUDA device: time it with CUDA events and reduce the gradient norms on
  // the device (no host synchronisation). Only honoured in a CUDA build (CLOUDTUNE_WITH_CUDA);
  // otherwise the host clock is used.
  bool cuda = false;
};

class Plugin {
 public:
  explicit Plugin(service::Options options);
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
  // Ends the optimizer step: samples per replica per micro-step and the micro-steps it had.
  void StepEnd(int64_t local_bsz, int64_t micro_steps = 1);
  // Whether the job should checkpoint now: a spot preemption notice was seen (plugin/online.h).
  bool ShouldCheckpoint() const;
  // Writes the "end" record and the final profile, stops the writer. Idempotent.
  void Finish();

  // --- the seam for the tuner (issue #6) ---
  void SetObserver(Observer observer);
  service::Sidecar* sidecar() { return &sidecar_; }  // for other record writers (rank 0)
  const service::Options& options() const { return opt_; }
  const JobInfo& job() const { return job_; }
  int64_t step() const { return step_; }
  hooks::GnsState noise() const { return gns_.State(); }
  std::vector<estimator::Measurement> profile() const;

 private:
  struct ConfigStats {  // running sums of one configuration's post-warm-up steps
    double step_sum = 0, sync_sum = 0;
    int64_t rows = 0;
  };
  void Fail(const char* where, const std::string& what);
  void Log(const std::string& line) const;
  void EndInterval();
  void AddTiming(const hooks::StepSample& s);
  estimator::ConfigKey KeyFor(int64_t local_bsz, int64_t micro_steps) const;
  nlohmann::json ConfigJson(const estimator::ConfigKey& k) const;
  void WriteProfile();

  service::Options opt_;
  JobInfo job_;
  std::atomic<bool> enabled_{false};
  bool leader_ = false;  // rank 0: measures, writes
  bool finished_ = false;
  service::Sidecar sidecar_;
  hooks::StepTimer timer_;
  hooks::GnsEstimator gns_;
  Observer observer_;

  int64_t step_ = 0;
  std::chrono::steady_clock::time_point started_{};
  // Current configuration and warm-up.
  bool have_config_ = false;
  estimator::ConfigKey config_;
  int64_t warmup_left_ = 0;
  // Gradient bookkeeping of the step in flight.
  double local_sum_ = 0;
  int64_t micro_seen_ = 0;
  bool have_pending_ = false;
  hooks::GnsSample pending_;
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
  // Profile, per configuration.
  mutable std::mutex profile_mu_;
  std::map<estimator::ConfigKey, ConfigStats> configs_;
  // The online tuner, HTTP endpoint, preemption watcher and saved state (plugin/online.h).
  std::shared_ptr<Online> online_;
};

}  // namespace cloudtune::plugin
