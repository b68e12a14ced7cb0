// The process-wide plugin behind include/cloudtune/cloudtune.h and the torch ops.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <iostream>
#include <memory>

#include "cloudtune/cloudtune.h"
#include "plugin/runtime/fit_and_search.h"
#include "plugin/torch/plugin.h"
#include "plugin/torch/signals.h"

namespace cloudtune {
namespace {

std::unique_ptr<plugin::Plugin>& Global() {
  static std::unique_ptr<plugin::Plugin> p;
  return p;
}

// Hot-path guard: a plain pointer read when off.
plugin::Plugin* On() {
  plugin::Plugin* p = Global().get();
  return p && p->enabled() ? p : nullptr;
}

}  // namespace

bool Init(const JobInfo& job) {
  try {
    if (Global()) return Global()->enabled();
    std::string error;
    runtime::Options opt = runtime::Options::FromEnv(&error);
    if (!error.empty()) {
      if (opt.enabled && job.rank == 0)
        std::cerr << "cloudtune: invalid setting " << error << "; plugin switched off\n";
      opt.enabled = false;
    }
    Global() = std::make_unique<plugin::Plugin>(opt);
    const bool on = Global()->Start(job);
    if (on && job.rank == 0)  // rank 0 writes the sidecar: end it cleanly on SIGTERM
      plugin::WatchTermination([] { Global()->EndOnSignal("SIGTERM"); });
    return on;
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: init failed: " << e.what() << "; plugin switched off\n";
    return false;
  }
}

bool Enabled() { return On() != nullptr; }
void StepBegin() {
  if (auto* p = On()) p->StepBegin();
}
void SyncBegin() {
  if (auto* p = On()) p->SyncBegin();
}
void SyncEnd() {
  if (auto* p = On()) p->SyncEnd();
}
double GradsLocal(const std::vector<at::Tensor>& grads) {
  auto* p = On();
  return p ? p->GradsLocal(grads) : 0.0;
}
void GradsReduced(const std::vector<at::Tensor>& grads, double reduced_slot) {
  if (auto* p = On()) p->GradsReduced(grads, reduced_slot);
}
at::Tensor GradsLocalTensor(const std::vector<at::Tensor>& grads) {
  if (auto* p = On()) return p->GradsLocalTensor(grads);
  at::Device dev = at::kCPU;
  for (const auto& g : grads)
    if (g.defined()) dev = g.device();
  return at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(dev));
}
void GradsReducedTensor(const std::vector<at::Tensor>& grads, const at::Tensor& reduced_slot) {
  if (auto* p = On()) p->GradsReducedTensor(grads, reduced_slot);
}
void ReplicaBatches(double mean_inv_batch, double mean_batch) {
  if (auto* p = On()) p->ReplicaBatches(mean_inv_batch, mean_batch);
}
void StepEnd(int64_t local_bsz, int64_t micro_steps) {
  if (auto* p = On()) p->StepEnd(local_bsz, micro_steps);
}
bool ShouldCheckpoint() {
  auto* p = On();
  return p ? p->ShouldCheckpoint() : false;
}
void SetTarget(const Target& target) {
  auto* p = On();
  if (!p) return;
  runtime::Target t;
  t.epochs = target.epochs;
  t.samples = target.samples;
  t.steps = target.steps;
  t.dataset_size = target.dataset_size;
  p->SetTarget(t);
}
void Shutdown() {
  plugin::StopWatchingTermination();
  if (Global()) Global()->Finish();
}
}  // namespace cloudtune

namespace cloudtune::plugin {
Plugin* Instance() { return Global().get(); }
}  // namespace cloudtune::plugin

// ---- torch ops: torch.ops.cloudtune.* ----------------------------------------------------------
namespace {

bool OpInit(int64_t rank, int64_t world_size, int64_t local_bsz, int64_t micro_steps,
            int64_t num_nodes) {
  cloudtune::JobInfo job;
  job.rank = static_cast<int>(rank);
  job.world_size = static_cast<int>(world_size);
  job.local_bsz = static_cast<int>(local_bsz);
  job.micro_steps = static_cast<int>(micro_steps);
  job.num_nodes = static_cast<int>(num_nodes);
  return cloudtune::Init(job);
}
bool OpEnabled() { return cloudtune::Enabled(); }
void OpStepBegin() { cloudtune::StepBegin(); }
void OpSyncBegin() { cloudtune::SyncBegin(); }
void OpSyncEnd() { cloudtune::SyncEnd(); }
double OpGradsLocal(std::vector<at::Tensor> grads) { return cloudtune::GradsLocal(grads); }
void OpGradsReduced(std::vector<at::Tensor> grads, double slot) {
  cloudtune::GradsReduced(grads, slot);
}
void OpStepEnd(int64_t local_bsz, int64_t micro_steps) {
  cloudtune::StepEnd(local_bsz, micro_steps);
}
bool OpShouldCheckpoint() { return cloudtune::ShouldCheckpoint(); }
void OpSetTarget(double epochs, double samples, double steps, double dataset_size) {
  cloudtune::SetTarget({epochs, samples, steps, dataset_size});
}
void OpShutdown() { cloudtune::Shutdown(); }
// The model's parameters (shapes only): its signature for the job history.
void OpNoteModel(std::vector<at::Tensor> params) {
  if (cloudtune::plugin::Plugin* p = cloudtune::plugin::Instance()) p->NoteModel(params);
}

}  // namespace

TORCH_LIBRARY(cloudtune, m) {
  m.def(
      "init(int rank, int world_size, int local_bsz=0, int micro_steps=1, int num_nodes=0) -> bool",
      &OpInit);
  m.def("enabled() -> bool", &OpEnabled);
  m.def("step_begin() -> ()", &OpStepBegin);
  m.def("sync_begin() -> ()", &OpSyncBegin);
  m.def("sync_end() -> ()", &OpSyncEnd);
  m.def("grads_local(Tensor[] grads) -> float", &OpGradsLocal);
  m.def("grads_reduced(Tensor[] grads, float reduced_slot) -> ()", &OpGradsReduced);
  m.def("step_end(int local_bsz, int micro_steps=1) -> ()", &OpStepEnd);
  m.def("should_checkpoint() -> bool", &OpShouldCheckpoint);
  m.def("set_target(float epochs=0, float samples=0, float steps=0, float dataset_size=0) -> ()",
        &OpSetTarget);
  m.def("shutdown() -> ()", &OpShutdown);
  m.def("note_model(Tensor[] params) -> ()", &OpNoteModel);
}
