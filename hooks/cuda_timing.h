// CUDA path of the hooks (compiled only when CLOUDTUNE_WITH_CUDA, i.e. CMake found a CUDA
// LibTorch and nvcc): step and all-reduce timing with CUDA events recorded on the current stream,
// so that no host synchronisation is added, and the gradient squared norm computed on the device
// into a device scalar (read later, asynchronously).
#pragma once

#ifdef CLOUDTUNE_WITH_CUDA

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAEvent.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "hooks/step_timer.h"

namespace cloudtune::hooks {

// Records timing events on the current CUDA stream; completed steps are collected with Poll(),
// which never blocks. sync = SyncBegin → SyncEnd (first begin to last end of the step).
class CudaStepTimer {
 public:
  void StepBegin();
  void SyncBegin();
  void SyncEnd();
  void StepEnd(int64_t local_bsz, int64_t micro_steps);
  // Pops the oldest step whose events have completed; false when none has.
  bool Poll(StepSample* out);
  size_t in_flight() const { return done_.size(); }

 private:
  struct Step {
    std::unique_ptr<at::cuda::CUDAEvent> begin, sync_begin, sync_end, end;
    int64_t local_bsz = 0, micro_steps = 1;
  };
  static std::unique_ptr<at::cuda::CUDAEvent> Record();
  Step cur_;
  bool in_step_ = false;
  std::deque<Step> done_;
};

// The current CUDA device's name (e.g. "Tesla T4"), for mapping the job to a catalog GPU.
std::string CudaDeviceName();

// Σ x² over all tensors, computed on their device into one 0-dim float64 tensor; no host read.
at::Tensor SquaredNormDevice(const std::vector<at::Tensor>& tensors);

// Device scalars copied to pinned host memory without blocking; Ready() tells when readable.
class AsyncScalars {
 public:
  // Starts copying `values` (a 1-D float64 device tensor) to the host.
  void Start(const at::Tensor& values);
  bool Pending() const { return pending_; }
  // True (and *out filled) once the copy completed; never blocks.
  bool Ready(std::vector<double>* out);

 private:
  at::Tensor host_;
  std::unique_ptr<at::cuda::CUDAEvent> done_;
  bool pending_ = false;
};

}  // namespace cloudtune::hooks

#endif  // CLOUDTUNE_WITH_CUDA
