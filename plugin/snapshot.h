// What the in-loop plugin hands to the background tuner (issue #6) every measurement interval.
// Plain C++ (no torch): the seam between the training thread and the tuner.
//
//   plugin->SetObserver([&](std::shared_ptr<const Snapshot> s) { executor.post(...); });
//
// The observer runs ON THE TRAINING THREAD, on rank 0 only, once per CLOUDTUNE_MEASURE_EVERY steps:
// it must return at once (O(1): hand the pointer to another thread). It must not throw; if it does
// the exception is logged and the observer is dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "estimator/efficiency.h"
#include "estimator/trace.h"

namespace cloudtune::plugin {

struct Snapshot {
  int64_t step = 0;             // optimizer steps completed so far
  double elapsed_seconds = 0;   // since Init
  estimator::ConfigKey config;  // the configuration running now
  // Every configuration measured so far (means over its post-warm-up steps), the same rows the
  // profile CSV holds.
  std::vector<estimator::Measurement> profile;
  estimator::NoiseState noise;    // smoothed gradient statistics (noise.biased: single replica)
  bool noise_valid = false;       // false until a gradient-noise step has been folded in
  int64_t skipped_steps = 0;      // steps with non-finite gradients (never folded in)
  double samples_per_second = 0;  // over the last interval
};

using Observer = std::function<void(std::shared_ptr<const Snapshot>)>;

}  // namespace cloudtune::plugin
