// Ground truth of statistical efficiency for the replay: how many optimizer steps a run at batch B
// really took, from validation traces measured at each batch size (shared/data/traces/*/
// validation-<B>.csv: progress,iteration,metric,...), never from cloudtune's models.
//
// The job's state is carried across a batch change by a measured quantity, one of two readings:
//   - Carry::kMetric: the best validation metric reached so far (the traces' metrics rise:
//     accuracy, F1, hit rate);
//   - Carry::kProgress: the traces' own progress column (the scale-invariant iterations the runs'
//     adaptive learning-rate scaling counted; their learning-rate schedule follows it, so a job
//     that changes batch stays at the same point of its schedule).
// The metric reading lets a schedule that changes batch jump to whichever run reached the current
// metric just before its next rise (a learning-rate decay, or noise), which no training does; the
// progress reading keeps the schedule but judges the run by its progress, not its accuracy.
// A run at batch B that has reached value v needs IterationsTo(B, target) − IterationsTo(B, v)
// more steps, where IterationsTo(B, v) is the first iteration at which B's run reached v (linear
// between the rows at which its best value rose: a plateau of rows is read as approaching the next
// best). Between two measured batches the iterations are interpolated linearly in
// (log B, log iterations); batches outside the measured range are not offered (InputError).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cloudtune::replay {

class MeasuredSteps {
 public:
  enum class Carry { kMetric, kProgress };
  // "metric" or "progress"; throws cloudtune::InputError naming `where` otherwise.
  static Carry ParseCarry(const std::string& text, const std::string& where);

  // One validation CSV per batch (batch -> path). Throws cloudtune::InputError naming the file,
  // line and column (a missing column, a non-number, iterations going down), or when fewer than
  // one run or a run without rows is given.
  static MeasuredSteps Load(const std::map<int, std::string>& runs, Carry carry = Carry::kMetric);
  // The same from CSV texts (batch -> text), `name` prefixes the messages.
  static MeasuredSteps Parse(const std::map<int, std::string>& texts, const std::string& name,
                             Carry carry = Carry::kMetric);

  // Below, "metric" is the carried value: the validation metric, or the progress column.
  Carry carry() const { return carry_; }
  // The highest value every measured run reaches: a target all of them meet.
  double CommonTarget() const;
  // The value at the start: the lowest first-row metric, or progress 0.
  double StartMetric() const;
  // Optimizer steps at `batch` to go from metric `from` to metric `to` (to >= from; both within
  // [StartMetric(), what the runs at the neighbouring batches reach]).
  double StepsBetween(double batch, double from, double to) const;
  // The metric reached after `steps` optimizer steps at `batch` starting from metric `from`
  // (capped at the best the neighbouring runs reached).
  double MetricAfter(double batch, double from, double steps) const;
  double min_batch() const { return runs_.begin()->first; }
  double max_batch() const { return runs_.rbegin()->first; }
  std::vector<int> batches() const;

 private:
  struct Run {
    std::vector<double> iteration, best;  // per row: iteration, best metric so far (non-decreasing)
  };
  // Iterations a measured run takes to first reach metric m (0 at or below its first row's start).
  static double IterationsTo(const Run& r, double m);
  // log-B interpolation of IterationsTo between the measured neighbours of `batch`.
  double Iterations(double batch, double m) const;
  std::map<int, Run> runs_;
  Carry carry_ = Carry::kMetric;
};

}  // namespace cloudtune::replay
