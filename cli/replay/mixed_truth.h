// The replay's truth for a mixed cluster (several instance types, each with its own local batch).
// No trace measures a mixed cluster, so its step time is composed from each type's measured rows,
// as a synchronous data-parallel step over types runs: the slowest part's compute at its local
// batch, then one all-reduce over the whole ring, bounded by its slowest link. A cluster of one
// hardware at one local batch (spot and on-demand nodes of one type) is its measured row.
//  - compute of a part: the measured compute time (step_time − sync_time) of its type on one node
//    with its GPUs per node (or the fewest nodes measured with that many), linear in the local
//    batch between the measured local batches; within [0.5 × the smallest, 1.5 × the largest]
//    measured local batch the line through the two nearest rows extends (compute grows
//    linearly with the batch once the GPU is busy; proportional scaling if that line turns
//    non-positive), beyond it the cluster is not offered;
//  - all-reduce: the measured sync_time of a part's type at the cluster's total node count with
//    its GPUs per node (median over the local batches; linear in the node count between measured
//    counts, never beyond them), the largest over the parts that have one, times the ratio of
//    that type's network bandwidth to the slowest part's (catalog network_gbps): the ring runs at
//    its slowest link. A cluster whose node count no part's type has measured (nor lies between
//    two measured counts) is not offered.
// The composition is an approximation of measured quantities, never a fitted model; it is the
// same for every policy.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "estimator/core/types.h"
#include "search/catalog.h"
#include "search/mixed.h"

namespace cloudtune::replay {

struct MixedTruthStep {
  double step_time = 0;  // seconds per optimizer step
  double sync_time = 0;  // of which the all-reduce
};

// Samples per optimizer step of a mixed cluster at its per-part local batches.
double MixedBatch(const search::MixedEvaluation& m);
// The single-type configuration a mixed cluster is when it is one hardware at one local batch
// (spot and on-demand nodes of one type): its measured row and the hooks' profile key.
std::optional<core::ConfigKey> OneHardwareKey(const search::MixedConfig& c,
                                              const std::vector<int>& local_bsz);
// Whether two (optional) mixed clusters have the same parts (type, nodes, GPUs per node,
// purchase) and, with `batches`, the same local batches; two empty ones are the same.
bool SameMixed(const std::optional<search::MixedEvaluation>& a,
               const std::optional<search::MixedEvaluation>& b, bool batches);

class MixedTruth {
 public:
  // `traces`: the scenario's true step times (instance_type set).
  MixedTruth(const search::Catalog& catalog, const std::vector<core::Measurement>& traces);
  // The cluster at the given per-part local batches; nullopt when it cannot be composed from the
  // measurements (see above).
  std::optional<MixedTruthStep> Step(const search::MixedConfig& c,
                                     const std::vector<int>& local_bsz) const;
  // The measured compute time of one part (nullopt outside the measured range).
  std::optional<double> Compute(const std::string& type, int gpus_per_node, int local_bsz) const;
  // The measured all-reduce of `type` over `nodes` nodes of `gpus_per_node` GPUs.
  std::optional<double> Sync(const std::string& type, int nodes, int gpus_per_node) const;

 private:
  const search::Catalog& catalog_;
  const std::vector<core::Measurement>& traces_;
};

}  // namespace cloudtune::replay
