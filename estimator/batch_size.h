// In-process batch-size adaptation (plain C++; the plugin wires it to the training loop).
//
// Given the current world size, a predictor of the step time of (local batch, accumulation), the
// statistical efficiency (EfficiencyModel or NoiseState) and the progress made, recommends the
// local batch and accumulation steps that maximise goodput = throughput x efficiency, switching
// away from the current configuration only when the predicted goodput gain exceeds a threshold
// (AdaptDL found ~5% necessary against batch-size churn), bounded by a maximum local batch that an
// out-of-memory report lowers. Also gives the learning-rate scale for the chosen batch.
//
//   BatchSizeController c(opts);
//   BatchSizeDecision d = c.Recommend(replicas, step_time_fn, model, progress, cur_bsz, cur_accum);
//   if (d.switched) { set batch d.local_bsz, accumulation d.accum_steps; lr *= d.lr_factor; }
//   on CUDA OOM at local batch b: c.ReportOutOfMemory(b);
#pragma once

#include <functional>
#include <string>

#include "estimator/efficiency.h"
#include "estimator/throughput.h"

namespace cloudtune::estimator {

// How the learning rate follows the batch. The scale is relative to the LR tuned at B0.
enum class LrScaling {
  kAdaScale,    // scale = gain(B) (AdaScale: progress per step)   — the default
  kSquareRoot,  // scale = sqrt(B / B0)
  kLinear,      // scale = B / B0
};
const char* LrScalingName(LrScaling rule);  // "adascale", "sqrt", "linear"
// Parses "adascale" | "sqrt" | "linear"; false (and `rule` untouched) otherwise.
bool ParseLrScaling(const std::string& name, LrScaling* rule);
// LR multiplier at total batch `batch` relative to the LR at `base_batch`; `gain` is the gain of a
// step at `batch` (used by kAdaScale only).
double LrScale(LrScaling rule, double batch, double base_batch, double gain);

struct BatchSizeOptions {
  // Largest samples per worker per micro-step (memory bound). A job sets it from
  // runtime::Options::max_local_batch (CLOUDTUNE_MAX_LOCAL_BATCH). >= min_local_batch.
  int max_local_batch = 1024;
  // Smallest samples per worker per micro-step. >= 1.
  int min_local_batch = 1;
  // Most extra accumulation micro-steps per optimizer step (0 = never accumulate). >= 0.
  int max_accum_steps = 7;
  // Total batch bounds (samples per optimizer step). min 0 = the efficiency model's B0 (a batch
  // below the one the LR was tuned at is never proposed); max 0 = unbounded.
  double min_global_batch = 0;
  double max_global_batch = 0;
  // Switch only when goodput(best) > goodput(current) * (1 + switch_threshold). >= 0.
  double switch_threshold = 0.05;
  LrScaling lr_scaling = LrScaling::kAdaScale;
  // After an OOM at local batch b the cap becomes min(cap, floor(b * oom_backoff), b - 1).
  // In (0, 1].
  double oom_backoff = 0.9;
  bool IsValid(std::string* error) const;
};

struct BatchSizeDecision {
  int local_bsz = 0;           // recommended samples per worker per micro-step
  int accum_steps = 0;         // recommended extra accumulation micro-steps
  long long global_batch = 0;  // replicas * local_bsz * (accum_steps + 1)
  bool switched = false;       // differs from the current configuration
  bool forced = false;         // the current configuration was infeasible (over the cap, bounds)
  double step_time = 0;        // predicted seconds per optimizer step of the recommendation
  double throughput = 0;       // samples/s
  double efficiency = 0;       // statistical efficiency at the recommendation
  double goodput = 0;          // throughput * efficiency (B0-equivalent samples/s)
  double best_goodput = 0;     // goodput of the best candidate (== goodput when switched)
  double current_goodput = 0;  // goodput of the current configuration (0 if infeasible)
  double predicted_gain = 0;   // best_goodput / current_goodput - 1 (inf if current infeasible)
  double lr_scale = 1;         // LR multiplier of the recommendation relative to the LR at B0
  double lr_factor = 1;        // LR multiplier relative to the current configuration's LR
};

class BatchSizeController {
 public:
  // Seconds per optimizer step at the current world size for a local batch and extra
  // accumulation micro-steps. Non-positive or non-finite = infeasible.
  using StepTimeFn = std::function<double(int local_bsz, int accum_steps)>;

  // Throws std::invalid_argument when !options.IsValid().
  explicit BatchSizeController(const BatchSizeOptions& options = {});

  // The best configuration for `replicas` workers at `progress` (B0-steps). current_local_bsz /
  // current_accum describe what runs now (current_local_bsz <= 0: nothing yet, always switch).
  // Throws std::invalid_argument on replicas < 1 or when no candidate is feasible.
  BatchSizeDecision Recommend(int replicas, const StepTimeFn& step_time,
                              const EfficiencyModel& efficiency, double progress,
                              int current_local_bsz, int current_accum) const;
  BatchSizeDecision Recommend(int replicas, const StepTimeFn& step_time, const NoiseState& noise,
                              int current_local_bsz, int current_accum) const;

  // An out-of-memory error happened at `local_bsz`: lower the cap below it (never below
  // min_local_batch).
  void ReportOutOfMemory(int local_bsz);
  int max_local_batch() const { return cap_; }
  const BatchSizeOptions& options() const { return options_; }

 private:
  BatchSizeOptions options_;
  int cap_;
};

// A StepTimeFn from a fitted throughput model for `num_nodes` machines and `replicas` workers
// (gpus_per_node and instance_type as in ThroughputModel::Predict / ConfigKey). The model is
// copied into the function.
BatchSizeController::StepTimeFn StepTimeFromThroughput(const ThroughputModel& model, int num_nodes,
                                                       int replicas, int gpus_per_node = 0,
                                                       const std::string& instance_type = "");

}  // namespace cloudtune::estimator
