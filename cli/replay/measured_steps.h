// Ground truth of statistical efficiency for the replay: how many optimizer steps a run at batch B
// really took, from validation traces measured at each batch size (shared/data/traces/*/
// validation-<B>.csv: progress,iteration,metric,...), never from cloudtune's models.
//
// The job's state is carried across a batch change by a measured quantity, one of two readings:
//   - Carry::kMetric: the best validation metric reached so far. A metric that falls as the job
//     learns (an error rate, a word error rate, a loss) is carried negated, so that the carried
//     value always rises; whether it falls is stated (Mode) or read from the runs (each run's
//     last row against its first). Before a run's first row nothing is known of a falling metric,
//     so every run starts at its first row: the first validation period's iterations are counted
//     at no batch. A rising metric is read as 0 at iteration 0, linear to the first row;
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

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace cloudtune::replay {

class MeasuredSteps {
 public:
  enum class Carry { kMetric, kProgress };
  // "metric" or "progress"; throws cloudtune::InputError naming `where` otherwise.
  static Carry ParseCarry(const std::string& text, const std::string& where);
  // Whether a better validation metric is higher (kMax: accuracy, F1, hit rate) or lower (kMin:
  // error rate, WER, loss); kAuto reads it from the runs. Only the metric reading uses it.
  enum class Mode { kAuto, kMax, kMin };
  // "max" or "min" (the names of PyTorch Lightning's and Keras' `mode`); throws
  // cloudtune::InputError naming `where` otherwise.
  static Mode ParseMode(const std::string& text, const std::string& where);

  // One validation CSV per batch (batch -> path). Throws cloudtune::InputError naming the file,
  // line and column (a missing column, a non-number, iterations going down), or when fewer than
  // one run or a run without rows is given; with Mode::kAuto also when the runs do not say which
  // way the metric improves (one rises and another falls, or none changes).
  static MeasuredSteps Load(const std::map<int, std::string>& runs, Carry carry = Carry::kMetric,
                            Mode mode = Mode::kAuto);
  // The same from CSV texts (batch -> text), `name` prefixes the messages.
  static MeasuredSteps Parse(const std::map<int, std::string>& texts, const std::string& name,
                             Carry carry = Carry::kMetric, Mode mode = Mode::kAuto);

  // Below, "metric" is the carried value: the validation metric (negated where lower is better),
  // or the progress column. Carried() and Metric() convert from and to the traces' own units.
  Carry carry() const { return carry_; }
  // True where the carried value is the negated metric (a lower metric is better).
  bool negated() const { return sign_ < 0; }
  double Carried(double metric) const { return sign_ * metric; }
  double Metric(double carried) const { return sign_ * carried; }
  // The highest value every measured run reaches: a target all of them meet.
  double CommonTarget() const;
  // The value at the start: the lowest first-row metric, or progress 0.
  double StartMetric() const;
  // The value from which progress is counted (ProgressAt's zero): 0, or StartMetric() where that
  // is below 0 (a negated metric), where every run starts at its first row.
  double Origin() const { return std::min(0.0, StartMetric()); }
  // Optimizer steps at `batch` to go from metric `from` to metric `to` (to >= from; both within
  // [StartMetric(), what the runs at the neighbouring batches reach]).
  double StepsBetween(double batch, double from, double to) const;
  // The metric reached after `steps` optimizer steps at `batch` starting from metric `from`
  // (capped at the best the neighbouring runs reached).
  double MetricAfter(double batch, double from, double steps) const;
  double min_batch() const { return runs_.begin()->first; }
  double max_batch() const { return runs_.rbegin()->first; }
  std::vector<int> batches() const;

  struct Rows;  // one CSV's iterations and carried column, as read

 private:
  struct Run {
    std::vector<double> iteration, best;  // per row: iteration, best metric so far (non-decreasing)
  };
  // The runs from their rows: the carried value's sign (`mode`, or read from the rows), then each
  // run's best value so far.
  static MeasuredSteps Build(std::map<int, Rows>&& rows, const std::map<int, std::string>& names,
                             Carry carry, Mode mode);
  // Iterations a measured run takes to first reach metric m (at or below its first row: linear
  // from 0 at iteration 0 where that row is above 0, else the first row's iteration).
  static double IterationsTo(const Run& r, double m);
  // log-B interpolation of IterationsTo between the measured neighbours of `batch`.
  double Iterations(double batch, double m) const;
  std::map<int, Run> runs_;
  Carry carry_ = Carry::kMetric;
  double sign_ = 1;  // -1 where the carried value is the negated metric
};

}  // namespace cloudtune::replay
