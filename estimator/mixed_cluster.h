// Step time of a synchronous data-parallel job over machines of several instance types (a mixed
// cluster), from the one throughput model over types (throughput_types.h).
//
// Every replica holds the whole model and all of them all-reduce their gradients once per step, so
// a step takes the slowest replica's compute plus an all-reduce over the whole ring, whose slowest
// link sets its pace. The local batches are chosen per type so that the replicas finish their
// compute together (spotDNN, Sia): with T_c,i(b) type i's compute time at local batch b on its
// placement, find t with sum_i r_i * b_i(t) = B, b_i(t) = the batch type i computes in t; then
// round to integers keeping the global batch B exactly (the remainder goes to the parts whose
// compute stays shortest). The predicted step is
//   max_i T_i(N, R, b_i)
// where T_i is type i's model at the whole cluster's N machines and R replicas: its compute at
// b_i plus the exposed all-reduce of an (N, R) ring on its own links. Statistical efficiency
// depends on the global batch only, as for one type.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "estimator/throughput_types.h"

namespace cloudtune::estimator {

// One type's share of a mixed cluster.
struct ClusterPart {
  std::string instance_type;
  int nodes = 1;          // machines of this type (>= 1)
  int gpus_per_node = 1;  // GPUs used on each (>= 1)
  int replicas() const { return nodes * gpus_per_node; }
};

struct MixedStepPrediction {
  std::vector<int> local_bsz;        // per part: samples per replica per step (>= 1)
  std::vector<double> compute_time;  // per part: seconds of compute at its local batch
  long long global_batch = 0;        // sum of replicas x local batch (= the requested one)
  double step_time = 0;              // seconds per optimizer step
  double sync_time = 0;              // all-reduce not hidden behind compute
  double log_sigma = 0;              // of log(step_time), from the slowest part's model
  int slowest = 0;                   // index of the part whose step is the longest
  // max/min of the parts' compute times at the chosen batches (1 = perfectly balanced).
  double imbalance = 1;
};

// Balances the local batches of `parts` for `global_batch` samples per step and predicts the
// step. `hardware`: the catalog's figures for types the model did not measure. Throws
// cloudtune::InputError on no parts, a part with nodes/GPUs < 1, a global batch smaller than the
// number of replicas (each needs >= 1 sample), or a type that cannot be predicted.
MixedStepPrediction PredictMixed(const CrossTypeThroughputModel& model,
                                 const std::vector<ClusterPart>& parts, long long global_batch,
                                 const std::map<std::string, Hardware>& hardware = {});

// The same for many clusters (a search): keeps each type's model and every compute time it has
// evaluated, so that balancing a cluster costs table look-ups. Not thread-safe; `model` and
// `hardware` must outlive it.
class MixedClusterPredictor {
 public:
  MixedClusterPredictor(const CrossTypeThroughputModel& model,
                        const std::map<std::string, Hardware>& hardware = {});
  ~MixedClusterPredictor();
  MixedStepPrediction Predict(const std::vector<ClusterPart>& parts, long long global_batch);

 private:
  struct Cache;
  const CrossTypeThroughputModel& model_;
  const std::map<std::string, Hardware>& hardware_;
  Cache* cache_;
};

}  // namespace cloudtune::estimator
