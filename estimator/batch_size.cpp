#include "estimator/batch_size.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <stdexcept>

namespace cloudtune::estimator {

const char* LrScalingName(LrScaling rule) {
  switch (rule) {
    case LrScaling::kAdaScale:
      return "adascale";
    case LrScaling::kSquareRoot:
      return "sqrt";
    case LrScaling::kLinear:
      return "linear";
  }
  return "?";
}

bool ParseLrScaling(const std::string& name, LrScaling* rule) {
  if (name == "adascale")
    *rule = LrScaling::kAdaScale;
  else if (name == "sqrt")
    *rule = LrScaling::kSquareRoot;
  else if (name == "linear")
    *rule = LrScaling::kLinear;
  else
    return false;
  return true;
}

double LrScale(LrScaling rule, double batch, double base_batch, double gain) {
  const double s = batch / base_batch;
  switch (rule) {
    case LrScaling::kAdaScale:
      return gain;
    case LrScaling::kSquareRoot:
      return std::sqrt(s);
    case LrScaling::kLinear:
      return s;
  }
  return 1.0;
}

bool BatchSizeOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (min_local_batch < 1) return fail("min_local_batch must be >= 1");
  if (max_local_batch < min_local_batch) return fail("max_local_batch must be >= min_local_batch");
  if (max_accum_steps < 0) return fail("max_accum_steps must be >= 0");
  if (!(min_global_batch >= 0) || !std::isfinite(min_global_batch))
    return fail("min_global_batch must be >= 0 (0 = the base batch B0)");
  if (!(max_global_batch >= 0) || !std::isfinite(max_global_batch))
    return fail("max_global_batch must be >= 0 (0 = unbounded)");
  if (max_global_batch > 0 && max_global_batch < min_global_batch)
    return fail("max_global_batch must be >= min_global_batch");
  if (!(switch_threshold >= 0) || !std::isfinite(switch_threshold))
    return fail("switch_threshold must be >= 0");
  if (!(oom_backoff > 0 && oom_backoff <= 1)) return fail("oom_backoff must be in (0, 1]");
  return true;
}

BatchSizeController::BatchSizeController(const BatchSizeOptions& options) : options_(options) {
  std::string err;
  if (!options_.IsValid(&err)) throw std::invalid_argument("BatchSizeOptions: " + err);
  cap_ = options_.max_local_batch;
}

void BatchSizeController::ReportOutOfMemory(int local_bsz) {
  const int lowered =
      std::min<int>(static_cast<int>(std::floor(local_bsz * options_.oom_backoff)), local_bsz - 1);
  cap_ = std::max(options_.min_local_batch, std::min(cap_, lowered));
}

BatchSizeDecision BatchSizeController::Recommend(int replicas, const StepTimeFn& step_time,
                                                 const EfficiencyModel& eff, double progress,
                                                 int cur_bsz, int cur_accum) const {
  if (replicas < 1) throw std::invalid_argument("Recommend: replicas must be >= 1");
  const double b0 = eff.base_batch();
  const double min_b = options_.min_global_batch > 0 ? options_.min_global_batch : b0;
  const double max_b = options_.max_global_batch > 0 ? options_.max_global_batch
                                                     : std::numeric_limits<double>::infinity();

  struct Eval {
    double time = 0, thr = 0, eff = 0, goodput = 0;
    bool ok = false;
  };
  auto evaluate = [&](int b, int a) {
    Eval e;
    const double t = step_time(b, a);
    if (!(t > 0) || !std::isfinite(t)) return e;
    const double B = static_cast<double>(replicas) * b * (a + 1);
    e.time = t;
    e.thr = B / t;
    e.eff = eff.EfficiencyAt(B, progress);
    e.goodput = e.thr * e.eff;
    e.ok = std::isfinite(e.goodput) && e.goodput > 0;
    return e;
  };

  // Local batches: every integer of a small range, else a geometric grid (plus the ends).
  std::set<int> locals;
  const int lo = options_.min_local_batch, hi = cap_;
  if (hi - lo <= 512) {
    for (int b = lo; b <= hi; ++b) locals.insert(b);
  } else {
    const int n = 256;
    for (int i = 0; i <= n; ++i)
      locals.insert(static_cast<int>(std::lround(lo * std::pow(double(hi) / lo, double(i) / n))));
  }
  if (cur_bsz >= lo && cur_bsz <= hi) locals.insert(cur_bsz);

  // The largest batch reachable, used when even it is below min_b (few replicas, low cap).
  const double reach = static_cast<double>(replicas) * hi * (options_.max_accum_steps + 1);
  const double lower = std::min(min_b, reach);

  BatchSizeDecision best;
  Eval best_e;
  for (int b : locals) {
    for (int a = 0; a <= options_.max_accum_steps; ++a) {
      const double B = static_cast<double>(replicas) * b * (a + 1);
      if (B < lower || B > max_b) continue;
      // Accumulate only when the local batch is at the cap (otherwise a larger b is cheaper).
      if (a > 0 && b != hi) continue;
      Eval e = evaluate(b, a);
      if (!e.ok || e.goodput <= best_e.goodput) continue;
      best_e = e;
      best.local_bsz = b;
      best.accum_steps = a;
    }
  }
  if (!best_e.ok) throw std::invalid_argument("Recommend: no feasible batch configuration");

  // The current configuration, if it is still feasible.
  Eval cur_e;
  bool cur_feasible = false;
  if (cur_bsz >= lo && cur_bsz <= hi && cur_accum >= 0 && cur_accum <= options_.max_accum_steps) {
    const double B = static_cast<double>(replicas) * cur_bsz * (cur_accum + 1);
    if (B >= lower && B <= max_b) {
      cur_e = evaluate(cur_bsz, cur_accum);
      cur_feasible = cur_e.ok;
    }
  }

  BatchSizeDecision d;
  d.best_goodput = best_e.goodput;
  d.current_goodput = cur_feasible ? cur_e.goodput : 0;
  d.predicted_gain =
      cur_feasible ? best_e.goodput / cur_e.goodput - 1 : std::numeric_limits<double>::infinity();
  d.forced = cur_bsz > 0 && !cur_feasible;
  const bool take_best = !cur_feasible || d.predicted_gain > options_.switch_threshold;
  const Eval& e = take_best ? best_e : cur_e;
  d.local_bsz = take_best ? best.local_bsz : cur_bsz;
  d.accum_steps = take_best ? best.accum_steps : cur_accum;
  d.switched = d.local_bsz != cur_bsz || d.accum_steps != cur_accum;
  d.global_batch = static_cast<long long>(replicas) * d.local_bsz * (d.accum_steps + 1);
  d.step_time = e.time;
  d.throughput = e.thr;
  d.efficiency = e.eff;
  d.goodput = e.goodput;
  const double B = static_cast<double>(d.global_batch);
  d.lr_scale = LrScale(options_.lr_scaling, B, b0, eff.GainAt(B, progress));
  if (cur_bsz > 0) {
    const double Bc = static_cast<double>(replicas) * cur_bsz * (std::max(cur_accum, 0) + 1);
    const double cur_scale = LrScale(options_.lr_scaling, Bc, b0, eff.GainAt(Bc, progress));
    d.lr_factor = d.lr_scale / cur_scale;
  } else {
    d.lr_factor = d.lr_scale;
  }
  return d;
}

BatchSizeDecision BatchSizeController::Recommend(int replicas, const StepTimeFn& step_time,
                                                 const NoiseState& noise, int cur_bsz,
                                                 int cur_accum) const {
  return Recommend(replicas, step_time, EfficiencyModel::FromNoise(noise), 0.0, cur_bsz, cur_accum);
}

BatchSizeController::StepTimeFn StepTimeFromThroughput(const ThroughputModel& model, int num_nodes,
                                                       int replicas, int gpus_per_node,
                                                       const std::string& instance_type) {
  return [model, num_nodes, replicas, gpus_per_node, instance_type](int b, int a) {
    ConfigKey k;
    k.num_nodes = num_nodes;
    k.num_replicas = replicas;
    k.local_bsz = b;
    k.accum_steps = a;
    k.instance_type = instance_type;
    return model.Predict(k, gpus_per_node).step_time;
  };
}

}  // namespace cloudtune::estimator
