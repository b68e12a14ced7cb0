#ifdef CLOUDTUNE_WITH_CUDA

#include "hooks/cuda_timing.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

namespace cloudtune::hooks {

std::unique_ptr<at::cuda::CUDAEvent> CudaStepTimer::Record() {
  auto ev = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);  // timing enabled
  ev->record(at::cuda::getCurrentCUDAStream());
  return ev;
}

void CudaStepTimer::StepBegin() {
  cur_ = Step{};
  cur_.begin = Record();
  in_step_ = true;
}

void CudaStepTimer::SyncBegin() {
  if (in_step_ && !cur_.sync_begin) cur_.sync_begin = Record();
}

void CudaStepTimer::SyncEnd() {
  if (in_step_ && cur_.sync_begin) cur_.sync_end = Record();
}

void CudaStepTimer::StepEnd(int64_t local_bsz, int64_t micro_steps) {
  if (!in_step_) return;
  in_step_ = false;
  cur_.end = Record();
  cur_.local_bsz = local_bsz;
  cur_.micro_steps = micro_steps < 1 ? 1 : micro_steps;
  done_.push_back(std::move(cur_));
  if (done_.size() > 64) done_.pop_front();  // never grow without bound
}

bool CudaStepTimer::Poll(StepSample* out) {
  if (done_.empty() || !done_.front().end->query()) return false;
  Step& s = done_.front();
  out->step_time = s.begin->elapsed_time(*s.end) / 1e3;
  out->sync_time = s.sync_begin && s.sync_end ? s.sync_begin->elapsed_time(*s.sync_end) / 1e3 : 0.0;
  out->local_bsz = s.local_bsz;
  out->micro_steps = s.micro_steps;
  done_.pop_front();
  return true;
}

std::string CudaDeviceName() {
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  return prop ? std::string(prop->name) : std::string();
}

at::Tensor SquaredNormDevice(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors)
    if (t.defined() && t.numel() > 0) parts.push_back(t.reshape({-1}));
  if (parts.empty()) return at::zeros({}, at::kDouble);
  // One fused norm kernel per tensor on the device, summed there.
  std::vector<at::Tensor> sq;
  sq.reserve(parts.size());
  for (auto& p : parts) sq.push_back(at::linalg_vector_norm(p, 2, {}, false, at::kDouble).square());
  return at::stack(sq).sum();
}

void AsyncScalars::Start(const at::Tensor& values) {
  if (!host_.defined() || host_.numel() != values.numel())
    host_ = at::empty({values.numel()}, at::TensorOptions().dtype(at::kDouble).pinned_memory(true));
  host_.copy_(values.to(at::kDouble), /*non_blocking=*/true);
  done_ = std::make_unique<at::cuda::CUDAEvent>();
  done_->record(at::cuda::getCurrentCUDAStream());
  pending_ = true;
}

bool AsyncScalars::Ready(std::vector<double>* out) {
  if (!pending_ || !done_->query()) return false;
  const double* p = host_.data_ptr<double>();
  out->assign(p, p + host_.numel());
  pending_ = false;
  return true;
}

}  // namespace cloudtune::hooks

#endif  // CLOUDTUNE_WITH_CUDA
