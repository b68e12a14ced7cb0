// cloudtune for C++ training loops: a handful of calls around the data-parallel step.
// Link cloudtune::plugin (find_package(cloudtune) after an install). Everything is off unless
// CLOUDTUNE=1 (then CLOUDTUNE_* configure it, see
// docs/plugin.md); when off, every call returns at once. No call ever throws.
//
//   cloudtune::Init({rank, world_size, 0, local_bsz});          // once, after the process group
//   for (...) {
//     cloudtune::StepBegin();
//     for each micro-step: forward, backward;
//         slot = cloudtune::GradsLocal(grads);                   // this micro-step's gradients
//     flat = [grads..., slot];                                   // one extra element
//     cloudtune::SyncBegin(); allreduce_sum(flat); cloudtune::SyncEnd();
//     flat /= world_size;
//     cloudtune::GradsReduced(averaged grads, flat[last]);
//     optimizer.step();
//     cloudtune::StepEnd(local_bsz, micro_steps);
//   }
//   cloudtune::Shutdown();
//
// The same functions are registered as torch ops (torch.ops.cloudtune.init, step_begin,
// sync_begin, sync_end, grads_local, grads_reduced, step_end, should_checkpoint, set_target,
// enabled, shutdown) for Python: torch.ops.load_library("libcloudtune_plugin.so").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace cloudtune {

// What the training job is.
struct JobInfo {
  int rank = 0;         // this process's rank in the data-parallel group
  int world_size = 1;   // replicas
  int num_nodes = 0;    // machines; 0 = from the launcher (GROUP_WORLD_SIZE, or world_size /
                        // LOCAL_WORLD_SIZE), else 1
  int local_bsz = 0;    // initial samples per replica per micro-step (0 = unknown yet)
  int micro_steps = 1;  // initial accumulation micro-steps per optimizer step
  // The step runs on a CUDA device: time it with CUDA events and reduce the gradient norms on
  // the device (no host synchronisation). Only honoured in a CUDA build; otherwise the host clock
  // is used.
  bool cuda = false;
};

// What counts as finished, set from the training loop (overrides CLOUDTUNE_TARGET_*). The first
// one set wins; all 0 = no target (the tuner then ranks configurations by cost per unit of
// progress, or progress per hour for CLOUDTUNE_OBJECTIVE=time).
struct Target {
  double epochs = 0;        // passes over the data (needs dataset_size)
  double samples = 0;       // training samples
  double steps = 0;         // optimizer steps at the initial batch
  double dataset_size = 0;  // samples per epoch
};

// Reads the CLOUDTUNE_* settings (once per process) and starts the plugin. Returns whether it is
// on. Whether it is on is agreed by all ranks through the job's store (MASTER_ADDR:MASTER_PORT):
// if any rank cannot switch on (an invalid setting, an unwritable sidecar …) every rank stays off,
// each saying so in one log line. Call it on every rank.
bool Init(const JobInfo& job);
bool Enabled();
void StepBegin();
void SyncBegin();
void SyncEnd();
// GradsLocal: one accumulation micro-step's local gradients (mean over its local batch), before
// the all-reduce; returns the value to put in the extra element of the all-reduce buffer (the sum
// of this step's micro-step squared norms so far; 0 when off). GradsReduced: the averaged
// gradients after the all-reduce and that extra element after it (sum-reduced, then divided by
// the world size like the gradients).
double GradsLocal(const std::vector<at::Tensor>& grads);
void GradsReduced(const std::vector<at::Tensor>& grads, double reduced_slot);
// Device variants (CUDA jobs, JobInfo::cuda): the slot stays a tensor on the gradients' device.
at::Tensor GradsLocalTensor(const std::vector<at::Tensor>& grads);
void GradsReducedTensor(const std::vector<at::Tensor>& grads, const at::Tensor& reduced_slot);
// Replicas with different local batches: before GradsReduced, the means over replicas of
// 1/local_bsz and local_bsz (two more all-reduced elements); the gradients combined weighted by
// samples (each scaled by local_bsz / mean before the average) and StepEnd given the mean batch.
void ReplicaBatches(double mean_inv_batch, double mean_batch);
void StepEnd(int64_t local_bsz, int64_t micro_steps = 1);
bool ShouldCheckpoint();
// Tells the tuner what counts as finished (any time after Init; a no-op when off).
void SetTarget(const Target& target);
// Writes the "end" record and the profile; safe to call when off or twice.
void Shutdown();

}  // namespace cloudtune
