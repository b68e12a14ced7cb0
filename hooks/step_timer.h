// Step timing on the training thread (plain C++, monotonic std::chrono::steady_clock).
//
//   timer.StepBegin();            // before the first forward of the optimizer step
//   ... forward/backward (x micro-steps) ...
//   timer.SyncBegin();            // before the gradient all-reduce (wait on it)
//   timer.SyncEnd();              // after it completed
//   StepSample s = timer.StepEnd(local_bsz, micro_steps);
//
// sync = total time between SyncBegin/SyncEnd pairs of the step (several are summed, e.g. one per
// bucket); compute = step − sync. O(1), no allocation.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

namespace cloudtune::hooks {

struct StepSample {
  double step_time = 0;     // seconds, StepBegin → StepEnd
  double sync_time = 0;     // seconds waiting on the all-reduce
  int64_t local_bsz = 0;    // samples per replica per micro-step
  int64_t micro_steps = 1;  // accumulation micro-steps of this optimizer step (>= 1)
  double compute_time() const { return step_time - sync_time; }
};

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;
  void StepBegin() {
    begin_ = Clock::now();
    sync_ = Clock::duration::zero();
    in_step_ = true;
    in_sync_ = false;
  }
  void SyncBegin() {
    sync_begin_ = Clock::now();
    in_sync_ = true;
  }
  void SyncEnd() {
    if (in_sync_) sync_ += Clock::now() - sync_begin_;
    in_sync_ = false;
  }
  // Ends the step; returns false (and leaves *out alone) when StepBegin was not called.
  bool StepEnd(int64_t local_bsz, int64_t micro_steps, StepSample* out) {
    if (!in_step_) return false;
    if (in_sync_) SyncEnd();
    const auto end = Clock::now();
    in_step_ = false;
    out->step_time = std::chrono::duration<double>(end - begin_).count();
    out->sync_time = std::chrono::duration<double>(sync_).count();
    out->local_bsz = local_bsz;
    out->micro_steps = micro_steps < 1 ? 1 : micro_steps;
    return true;
  }
  bool in_step() const { return in_step_; }

 private:
  Clock::time_point begin_{}, sync_begin_{};
  Clock::duration sync_{};
  bool in_step_ = false, in_sync_ = false;
};

// Running statistics of a series (Welford): mean, standard deviation, min, max.
class RunningStats {
 public:
  void Add(double x) {
    ++n_;
    const double d = x - mean_;
    mean_ += d / n_;
    m2_ += d * (x - mean_);
    if (x < min_) min_ = x;
    if (x > max_) max_ = x;
  }
  int64_t count() const { return n_; }
  double mean() const { return n_ ? mean_ : 0; }
  double stddev() const { return n_ > 1 ? std::sqrt(m2_ / (n_ - 1)) : 0; }
  double min() const { return n_ ? min_ : 0; }
  double max() const { return n_ ? max_ : 0; }
  void Reset() { *this = RunningStats(); }

 private:
  int64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
};

}  // namespace cloudtune::hooks
