// Mixed clusters in the search: when the capacity of the preferred instance type runs short, a
// cluster of two or three types, each with its own local batch (estimator/mixed_cluster.h).
//
// Candidates are not enumerated blindly. They start from the single-type search's best
// candidates (SearchResult::top): when the best one's type has fewer nodes available than it
// wants, the cluster keeps every available node of that type and fills up with nodes of the
// preferred type on demand (when it wanted spot) or of the other types among the top candidates
// (each at its own GPUs per node and purchase), at the global batches of the top candidates. A
// mixed cluster is priced per type and purchase and exposed to each type's revocations; it is
// proposed only when it beats the best single-type candidate the capacity allows by more than its
// added uncertainty (the difference of the two log-sigmas' quadrature over the single one's).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/search.h"

namespace cloudtune::search {

struct MixedPart {
  std::string type;  // instance type (catalog)
  int nodes = 1;
  int gpus_per_node = 1;
  Purchase purchase = Purchase::kOnDemand;
  int replicas() const { return nodes * gpus_per_node; }
};

struct MixedConfig {
  std::vector<MixedPart> parts;
  long long global_batch = 0;  // samples per optimizer step (no accumulation)
  int replicas() const;
  int nodes() const;
  // All parts of one type and one number of GPUs per node (spot and on-demand nodes of one
  // hardware): the cluster is a single-type configuration with mixed purchases.
  bool OneHardware() const;
  std::string ToString() const;  // "2x g4dn.12xlarge spot + 1x p3.8xlarge on-demand, batch 512"
};

// What the step-time predictor says of a mixed cluster.
struct MixedStep {
  Estimate step;               // seconds per optimizer step
  std::vector<int> local_bsz;  // per part
  long long global_batch = 0;  // as balanced (may exceed the requested one by < a part's GPUs)
};
using MixedStepFn = std::function<MixedStep(const MixedConfig&)>;

struct MixedEvaluation {
  MixedConfig config;
  std::vector<int> local_bsz;
  double step_time_s = 0, steps = 0, price_per_hour = 0, hours = 0, cost = 0;
  double revocations = 0, log_sigma = 0;
  bool feasible = true;
  double Objective(Goal g) const { return g == Goal::kCost ? cost : hours; }
};

struct MixedSearchOptions {
  int max_types = 2;  // types per cluster: 2 or 3
  // Nodes of each type that can be had now, whatever the purchase; a type not listed has
  // SpaceOptions::max_nodes.
  std::map<std::string, int> available_nodes;
  // Spot nodes of each type that can be had now (the spot capacity; on-demand nodes are not
  // limited by it); a type not listed has no spot limit. Recommend passes the job's
  // SpaceOptions::spot_nodes_available here.
  std::map<std::string, int> spot_nodes_available;
  int seeds = 6;  // distinct hardware choices of the single-type top list combined (>= 2)
  // A single-type candidate found elsewhere that the capacity allows (e.g. a search with the spot
  // limits applied, on demand included): the mixed cluster must beat it too when it is better than
  // the top list's best within the available nodes.
  std::optional<Evaluation> baseline;
  // The mixed cluster the job runs now, if any (its parts and global batch). Staying on it costs no
  // switch; while the capacity still holds its parts, another cluster or a single type replaces it
  // only when that saves more than `hysteresis` of its objective (a feasible one always replaces
  // an infeasible one).
  std::optional<MixedConfig> current;
  double hysteresis = 0;  // fraction, in [0, 1)
  bool IsValid(std::string* error) const;
};

struct MixedSearchResult {
  std::optional<MixedEvaluation> best;    // best mixed cluster evaluated
  std::optional<Evaluation> best_single;  // best single type within the available nodes
  bool proposed = false;                  // best beats best_single beyond its uncertainty
  bool keeps_current = false;             // best is MixedSearchOptions::current, stayed on
  size_t considered = 0;                  // mixed clusters evaluated
  std::string reason;
};

// A mixed cluster as the job describes the one it runs (core::Snapshot::mixed_parts), and back:
// the parts with their local batches; the global batch is their sum (0 when a part's is unknown).
std::vector<core::ClusterPart> PartsOf(const MixedEvaluation& m);
MixedConfig MixedConfigOf(const std::vector<core::ClusterPart>& parts);

// Expected time and cost of a mixed cluster (as Evaluate does for one type): switching from the
// current configuration costs switch_s (none when `stay`: the job runs `c` already); revocation
// rates add over the parts' spot nodes.
MixedEvaluation EvaluateMixed(const SearchProblem& p, const MixedConfig& c, const MixedStep& step,
                              const Estimate& steps, bool stay = false);

// The best mixed cluster around the single-type result `single` (SearchResult of Search(p) with a
// top list of several candidates). Throws cloudtune::InputError on invalid options.
MixedSearchResult SearchMixed(const SearchProblem& p, const SearchResult& single,
                              const MixedStepFn& step, const MixedSearchOptions& options = {});

}  // namespace cloudtune::search
