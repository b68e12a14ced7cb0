// The oracle's window model (oracle.h): what one decision window does under the replay's truth.
#include <algorithm>
#include <cmath>

#include "cli/replay/oracle.h"
#include "estimator/core/error.h"
#include "estimator/efficiency.h"
#include "search/cost.h"

namespace cloudtune::replay {

WindowModel::WindowModel(const Scenario& s, double window_s)
    : s_(s),
      window_s_(window_s > 0     ? window_s
                : s.spot.empty() ? s.decision_interval_s
                                 : std::min(s.decision_interval_s, s.measure_s)) {
  for (size_t i = 0; i < s.candidates.size(); ++i)
    step_[s.candidates[i].Key()] = s.traces[i].step_time;
}

double WindowModel::CheckpointShare(const Config& c) const {
  const InstanceType& t = s_.catalog.types[s_.catalog.Find(c.type)];
  const double ckpt =
      c.purchase == Purchase::kAnchor ? s_.cost.anchor_checkpoint_s : s_.cost.checkpoint_s;
  const double tau = YoungDalyInterval(ckpt, ClusterRevocationRate(t, c.nodes, c.purchase));
  return std::isfinite(tau) ? ckpt / tau : 0.0;
}

double WindowModel::StartProgress() const {
  return s_.measured ? s_.ProgressAt(s_.measured->StartMetric()) : 0.0;
}

double WindowModel::TrainSeconds(const Config& c, double switch_s) const {
  return std::max(0.0, window_s_ - switch_s) / (1 + CheckpointShare(c));
}

double WindowModel::MetricAt(double u) const {
  if (!s_.measured) return 0;
  const MeasuredSteps& m = *s_.measured;
  // The value whose progress (steps of the smallest batch from the origin) is u.
  return std::max(m.StartMetric(), m.MetricAfter(m.min_batch(), m.Origin(), u));
}

double WindowModel::Advance(const Config& c, double u, double train_s, double* finish_s) const {
  return Advance(c, u, MetricAt(u), train_s, finish_s);
}

double WindowModel::Advance(const Config& c, double u, double metric_u, double train_s,
                            double* finish_s) const {
  *finish_s = -1;
  const auto it = step_.find(c.Key());
  if (it == step_.end()) throw InputError("oracle: untraced configuration " + c.ToString());
  const double step = it->second;
  const double batch = static_cast<double>(c.global_batch());
  const double target = s_.target_progress;
  if (u >= target) {
    *finish_s = 0;
    return target;
  }
  if (s_.measured) {
    const MeasuredSteps& m = *s_.measured;
    const double from = metric_u;
    if (from >= s_.target_metric) {  // u is the target up to rounding
      *finish_s = 0;
      return target;
    }
    const double to = m.MetricAfter(batch, from, train_s / step);
    if (to >= s_.target_metric) {
      *finish_s = std::min(train_s, m.StepsBetween(batch, from, s_.target_metric) * step);
      return target;
    }
    return std::min(target, std::max(u, s_.ProgressAt(to)));
  }
  double left = train_s, done = 0;
  while (left > 1e-9) {
    const double chunk = std::min(kChunkS, left);
    const double dp = chunk / step * estimator::Gain(s_.NoiseAt(u), batch);
    if (u + dp >= target) {
      *finish_s = done + (dp > 0 ? (target - u) / dp : 1.0) * chunk;
      return target;
    }
    u += dp;
    done += chunk;
    left -= chunk;
  }
  return u;
}

}  // namespace cloudtune::replay
