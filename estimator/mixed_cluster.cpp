// PredictMixed: balanced local batches and the step time of a cluster of several instance types.
#include "estimator/mixed_cluster.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "estimator/core/error.h"

namespace cloudtune::estimator {

struct MixedClusterPredictor::Cache {
  std::map<std::string, ThroughputModel> models;
  // Compute time by (type, nodes, replicas, local batch).
  std::map<std::tuple<std::string, int, int, long long>, double> compute;
};

MixedClusterPredictor::MixedClusterPredictor(const CrossTypeThroughputModel& model,
                                             const std::map<std::string, Hardware>& hardware)
    : model_(model), hardware_(hardware), cache_(new Cache) {}

MixedClusterPredictor::~MixedClusterPredictor() { delete cache_; }

MixedStepPrediction PredictMixed(const CrossTypeThroughputModel& model,
                                 const std::vector<ClusterPart>& parts, long long global_batch,
                                 const std::map<std::string, Hardware>& hardware) {
  MixedClusterPredictor p(model, hardware);
  return p.Predict(parts, global_batch);
}

MixedStepPrediction MixedClusterPredictor::Predict(const std::vector<ClusterPart>& parts,
                                                   long long global_batch) {
  const CrossTypeThroughputModel& model = model_;
  const std::map<std::string, Hardware>& hardware = hardware_;
  if (parts.empty()) throw InputError("mixed cluster: no parts");
  long long replicas = 0;
  int nodes = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].nodes < 1 || parts[i].gpus_per_node < 1)
      throw InputError("mixed cluster: part " + std::to_string(i) + " (" + parts[i].instance_type +
                       "): nodes and gpus_per_node must be >= 1");
    replicas += parts[i].replicas();
    nodes += parts[i].nodes;
  }
  if (global_batch < replicas)
    throw InputError("mixed cluster: global batch " + std::to_string(global_batch) +
                     " is smaller than its " + std::to_string(replicas) +
                     " replicas (each needs a sample)");
  const int n = static_cast<int>(parts.size());
  std::vector<const ThroughputModel*> models;
  for (const auto& p : parts) {
    auto it = cache_->models.find(p.instance_type);
    if (it == cache_->models.end()) {
      auto hw = hardware.find(p.instance_type);
      it = cache_->models
               .emplace(p.instance_type,
                        model.ModelFor(p.instance_type, hw == hardware.end()
                                                            ? model.hardware(p.instance_type)
                                                            : hw->second))
               .first;
    }
    models.push_back(&it->second);
  }
  // Compute time of part i at local batch b on its own machines (memoised).
  auto compute = [&](int i, long long b) {
    b = std::min<long long>(b, 1 << 30);
    const auto key =
        std::make_tuple(parts[i].instance_type, parts[i].nodes, parts[i].replicas(), b);
    auto it = cache_->compute.find(key);
    if (it != cache_->compute.end()) return it->second;
    ConfigKey k;
    k.num_nodes = parts[i].nodes;
    k.num_replicas = parts[i].replicas();
    k.local_bsz = static_cast<int>(b);
    k.instance_type = parts[i].instance_type;
    const double t = models[i]->Predict(k).compute_time;
    cache_->compute.emplace(key, t);
    return t;
  };
  // The largest batch (>= 1) part i computes within t, up to `cap`.
  auto batch_within = [&](int i, double t, long long cap) {
    long long lo = 1, hi = cap;
    if (compute(i, hi) <= t) return hi;
    while (hi - lo > 1) {
      const long long mid = lo + (hi - lo) / 2;
      (compute(i, mid) <= t ? lo : hi) = mid;
    }
    return lo;
  };
  std::vector<long long> cap(n);
  for (int i = 0; i < n; ++i)
    cap[i] = std::max<long long>(
        1, (global_batch - (replicas - parts[i].replicas())) / parts[i].replicas());
  auto total = [&](double t, std::vector<long long>* b) {
    long long s = 0;
    for (int i = 0; i < n; ++i) {
      (*b)[i] = batch_within(i, t, cap[i]);
      s += (*b)[i] * parts[i].replicas();
    }
    return s;
  };
  // The shortest common compute time t whose batches hold the global batch (bisection in log t).
  double lo = 1e300, hi = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, compute(i, 1));
    hi = std::max(hi, compute(i, cap[i]));
  }
  std::vector<long long> b(n);
  if (total(lo, &b) < global_batch) {
    for (int it = 0; it < 60 && hi / lo > 1 + 1e-9; ++it) {
      const double mid = std::sqrt(lo * hi);
      (total(mid, &b) >= global_batch ? hi : lo) = mid;
    }
    total(hi, &b);
  }
  // Down to the global batch: take a sample per replica from the part that computes longest, as
  // long as the total stays >= the global batch.
  long long sum = 0;
  for (int i = 0; i < n; ++i) sum += b[i] * parts[i].replicas();
  while (sum > global_batch) {
    int pick = -1;
    double worst = -1;
    for (int i = 0; i < n; ++i)
      if (b[i] > 1 && sum - parts[i].replicas() >= global_batch) {
        const double c = compute(i, b[i]);
        if (c > worst) worst = c, pick = i;
      }
    if (pick < 0) break;
    b[pick] -= 1;
    sum -= parts[pick].replicas();
  }
  MixedStepPrediction out;
  out.global_batch = sum;
  double cmin = 1e300, cmax = 0;
  for (int i = 0; i < n; ++i) {
    out.local_bsz.push_back(static_cast<int>(b[i]));
    out.compute_time.push_back(compute(i, b[i]));
    cmin = std::min(cmin, out.compute_time.back());
    cmax = std::max(cmax, out.compute_time.back());
  }
  out.imbalance = cmin > 0 ? cmax / cmin : 1;
  // Each part on the whole (N, R) ring: its compute at its batch plus the all-reduce on its links.
  for (int i = 0; i < n; ++i) {
    ConfigKey k;
    k.num_nodes = nodes;
    k.num_replicas = static_cast<int>(replicas);
    k.local_bsz = static_cast<int>(b[i]);
    k.instance_type = parts[i].instance_type;
    const StepPrediction p = models[i]->Predict(k);
    if (p.step_time > out.step_time) {
      out.step_time = p.step_time;
      out.sync_time = p.sync_time;
      out.log_sigma = p.log_sigma;
      out.slowest = i;
    }
  }
  return out;
}

}  // namespace cloudtune::estimator
