// The one fit-and-search: from what a job has measured (a core::Snapshot) to a recommendation.
// The live job's background tuner, `cloudtune recommend` and the replay's cloudtune policy all
// call it through runtime::Runtime, so what the replay proves is what a job gets.
//
// One call fits the throughput model once per measured instance type (the models that decide are
// the models that are published), fits the statistical-efficiency drift model when the run has
// seen two or more batch sizes (else takes the noise state as it is), prices a straggler (keep it
// or replace the slow machine), and runs search::Recommend.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "estimator/core/types.h"
#include "estimator/efficiency.h"
#include "estimator/throughput.h"
#include "plugin/runtime/options.h"
#include "search/catalog.h"
#include "search/recommend.h"

namespace cloudtune::runtime {

using core::Snapshot;

// Thrown by FitAndSearch when the job has not measured enough yet (no configuration, no noise
// estimate): the tuner waits instead of reporting an error.
class NotReady : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown by FitAndSearch when the job has made its target progress (it trains on, e.g. to its last
// epoch, but there is nothing left to plan): the tuner says so once instead of reporting an error.
class TargetReached : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Why a refit runs.
struct RefitContext {
  std::string trigger;      // "timer", "config_change", "restored", "preemption", "straggler", …
  std::uint64_t index = 0;  // 1 for the first refit, …
};

// Result of one fit-and-search.
struct TunerResult {
  // The published document (GET /v1/recommendation): current and proposed configuration,
  // predicted gain, uncertainties, reason, alternatives, fitted models.
  nlohmann::json recommendation;
  // Identity of the proposal; when it differs from the previous refit's, the recommendation has
  // changed: a record is written and a line logged. (Numbers that merely drift do not count.)
  std::string change_key;
  // One readable line for the log.
  std::string log_line;
  // The decision itself (action, proposed configuration, evaluations) for callers that act on it.
  search::Recommendation decision;
  // The statistical-efficiency model it decided with.
  std::shared_ptr<const estimator::EfficiencyModel> efficiency;
};

// What counts as finished. The first one set wins: progress (B0-steps), optimizer steps at the
// initial batch, samples, epochs (× dataset_size samples). None set: no target, and the search
// ranks configurations by a rate (see FitAndSearch).
struct Target {
  double progress = 0;      // B0-steps (CLOUDTUNE_TARGET_PROGRESS)
  double steps = 0;         // optimizer steps at the initial batch (CLOUDTUNE_TARGET_STEPS)
  double samples = 0;       // training samples (CLOUDTUNE_TARGET_SAMPLES)
  double epochs = 0;        // passes over the data (CLOUDTUNE_TARGET_EPOCHS)
  double dataset_size = 0;  // samples per epoch (CLOUDTUNE_DATASET_SIZE; needed by epochs)
  bool set() const { return progress > 0 || steps > 0 || samples > 0 || epochs > 0; }
  // In B0-steps for a job whose base batch (its initial global batch) is `base_batch`; 0 when
  // none is set or it cannot be converted yet (epochs without a dataset size).
  double Progress(double base_batch) const;
  // "20000 B0-steps", "3 epochs" … or "none".
  std::string ToString() const;
};

struct FitAndSearchOptions {
  // Objective, constraints and search space. recommend.target_progress is set from `target` at
  // each call; current_progress, spent and exploration_spent are taken from the snapshot, and the
  // deadline and budget are reduced by what the snapshot has spent.
  search::RecommendOptions recommend;
  // What counts as finished (none: the rate objective).
  Target target;
  // With no target: configurations are compared on the progress the current configuration makes
  // in this many hours (cost per unit of progress, or hours per unit of progress for `time`; a
  // switch's cost is amortised over it). > 0.
  double rate_horizon_hours = 1.0;
  // Instance catalog; nullptr = search::DefaultCatalog(). Must outlive the calls.
  const search::Catalog* catalog = nullptr;
  // Instance type of the current configuration and of profile rows without one ("" = the
  // snapshot's current.instance_type). Must be in the catalog.
  std::string instance_type;
  // How the current nodes are bought.
  search::Purchase purchase = search::Purchase::kOnDemand;
  estimator::ThroughputFitOptions throughput;  // the per-type throughput fits
  estimator::EfficiencyFitOptions efficiency;  // used when noise_history spans >= 2 batches
  // A statistical-efficiency model given from outside (e.g. fitted offline from validation
  // traces): used instead of the noise state and its history.
  std::optional<estimator::EfficiencyModel> efficiency_model;
  // The configurations the job may move to (e.g. the traced ones of a replay scenario); empty =
  // the space generated from the catalog and recommend.space.
  std::vector<search::Config> candidates;
  bool IsValid(std::string* error) const;
};

// The mapping from the CLOUDTUNE_* options to the search, in one place (objective, deadline,
// budget, target, local-batch cap, instance type, candidates, clouds and GPUs). `catalog` must
// outlive the result. Throws cloudtune::InputError when the candidates file cannot be read or
// the clouds or GPUs name none of the catalog's types.
FitAndSearchOptions SearchOptionsFrom(const Options& options, const search::Catalog* catalog);

// The instance types two comma-separated lists of clouds and GPU models allow (Options::clouds and
// ::gpus; search::TypesOn); {} when both are empty (every type). Throws cloudtune::InputError
// naming the list (`clouds_name`, `gpus_name`: the variable or the CLI flag) and the value no
// catalog type has.
std::vector<std::string> AllowedTypes(const search::Catalog& catalog, const std::string& clouds,
                                      const std::string& gpus,
                                      const std::string& clouds_name = "CLOUDTUNE_CLOUDS",
                                      const std::string& gpus_name = "CLOUDTUNE_GPUS");

// The configurations of a trace as search candidates (on demand): rows without an instance type
// are of `default_type`; uneven placements are skipped. Throws cloudtune::InputError.
std::vector<search::Config> CandidatesFromTrace(const std::string& path,
                                                const std::string& default_type);

// The search request built from a snapshot (exposed so tests can check what is solved). With
// `preempted`, the current configuration is the fleet left after losing one node (>= 1 node).
search::RecommendRequest BuildRecommendRequest(const Snapshot& s, const FitAndSearchOptions& o,
                                               bool preempted = false);

// A straggler makes every rank wait for the slowest: divides the step time of the profile rows of
// the `current` configuration by `slowdown` (>= 1) and takes the excess out of their sync time, so
// that the models describe the hardware without the slow worker.
void DestraggleProfile(const core::ConfigKey& current, double slowdown,
                       std::vector<core::Measurement>* profile);

// One fit-and-search on `s`. With no target the objective is a rate: the search prices the
// progress H that the current configuration makes in rate_horizon_hours, so it ranks by cost per
// unit of progress (objective cost) or time per unit of progress (objective time); deadline and
// budget need a target and are ignored without one; the record says "target": "none" and gives
// each evaluation's "usd_per_progress" and "progress_per_hour".
//   recommendation = Recommendation::ToJson() + {"models":{"throughput","efficiency"},
//                    "progress","target_progress","step","straggler_factor","trigger",
//                    "preempted"[,"straggler"]}
//   change_key     = action + proposed configuration
//   log_line       = "cloudtune: <action> <proposed>: <hours> h, $<cost> (now …) - <reason>"
// The trigger "preemption" plans for the remaining fleet. Throws on an empty profile, no noise
// estimate yet, or an invalid request.
TunerResult FitAndSearch(const Snapshot& s, const RefitContext& ctx, const FitAndSearchOptions& o);

// The fit-and-search step the Tuner executor runs (a std::function, so tests can give a fake).
using FitAndSearchFn = std::function<TunerResult(const Snapshot&, const RefitContext&)>;
// FitAndSearch bound to `options` (whose catalog must outlive the function).
FitAndSearchFn MakeFitAndSearch(FitAndSearchOptions options);

}  // namespace cloudtune::runtime
