// Torch ops for Python's DistributedDataParallel communication hooks (python/cloudtune): the
// bucketed form of the slot protocol of plugin/cloudtune.h.
//
// DDP all-reduces a step's gradients in several buckets, each through the communication hook, and
// the completion callbacks may run on a Gloo thread. Squared norms add up over disjoint slices of
// the gradient, so per step:
//   slot_b = torch.ops.cloudtune.bucket_local(bucket_b)        # |g_i restricted to b|^2, local
//   all-reduce [bucket_b..., slot_b] (sum), divide by world size
//   torch.ops.cloudtune.bucket_reduced(bucket_b, reduced slot)  # any thread; summed over buckets
//   torch.ops.cloudtune.buckets_done()                          # training thread, before step_end
// buckets_done() hands the step's sums to the plugin as ONE micro-step (GradsLocal/GradsReduced),
// so a step with 5 buckets is one gradient-noise sample with count = world size, not 5 micro-steps.
// The plugin object itself is only touched on the training thread.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <mutex>

#include "cloudtune/cloudtune.h"
#include "hooks/grad_norm.h"
#include "plugin/torch/plugin.h"

namespace cloudtune {
namespace {

// The reduced sums of the step in flight (rank 0 only), written by the completion callbacks.
struct BucketSums {
  std::mutex mu;
  double local_sqr = 0;  // Σ_b mean over replicas of |g_i,b|^2
  double total_sqr = 0;  // Σ_b |ḡ_b|^2
  int64_t buckets = 0;
};

BucketSums& Sums() {
  static BucketSums s;
  return s;
}

bool Leader() {
  plugin::Plugin* p = plugin::Instance();
  return p && p->enabled() && p->job().rank == 0;
}

double OpBucketLocal(const at::Tensor& bucket) {
  if (!Enabled()) return 0;
  try {
    return hooks::SquaredNorm(bucket);
  } catch (const std::exception&) {
    return 0;  // never throws into the hook; the step's sample is then off, not the training
  }
}

void OpBucketReduced(const at::Tensor& bucket, double reduced_slot) {
  if (!Leader()) return;  // only rank 0 estimates the noise
  try {
    const double total = hooks::SquaredNorm(bucket);
    BucketSums& s = Sums();
    std::lock_guard<std::mutex> lock(s.mu);
    s.local_sqr += reduced_slot;
    s.total_sqr += total;
    ++s.buckets;
  } catch (const std::exception&) {
  }
}

// Returns the number of buckets folded into this step's sample (0 when none / off / not rank 0).
int64_t OpBucketsDone(int64_t micro_steps) {
  BucketSums& s = Sums();
  double local = 0, total = 0;
  int64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    std::swap(local, s.local_sqr);
    std::swap(total, s.total_sqr);
    std::swap(n, s.buckets);
  }
  plugin::Plugin* p = plugin::Instance();
  if (!p || !p->enabled() || n == 0) return 0;
  // With gradient accumulation under no_sync the hook sees each replica's accumulated gradient
  // only, not the micro-step gradients the estimator's count/micro_batch describe: no sample.
  if (micro_steps > 1 || p->job().world_size < 2) return 0;
  // One micro-step whose local squared norm is `local` (already averaged over replicas) and whose
  // averaged gradient has squared norm `total`: the plugin's protocol with a one-element stand-in
  // for the gradient (only its squared norm is read).
  p->GradsLocal({});
  p->GradsReduced({at::scalar_tensor(std::sqrt(std::max(total, 0.0)), at::kDouble)}, local);
  return n;
}

}  // namespace
}  // namespace cloudtune

TORCH_LIBRARY_FRAGMENT(cloudtune, m) {
  m.def("bucket_local(Tensor bucket) -> float", &cloudtune::OpBucketLocal);
  m.def("bucket_reduced(Tensor bucket, float reduced_slot) -> ()", &cloudtune::OpBucketReduced);
  m.def("buckets_done(int micro_steps=1) -> int", &cloudtune::OpBucketsDone);
}
