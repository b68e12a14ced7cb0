// The online search's single entry point: from the measured profile of a running job, recommend
// keeping, switching or measuring a configuration, and explain why.
//
//   RecommendRequest req;  req.profile = measurements;  req.noise = NoiseState{...};
//   req.current = Config{...};  req.options.target_progress = P;
//   Recommendation r = Recommend(req);  nlohmann::json j = r.ToJson();
//
// The plugin's background tuner and `cloudtune recommend` both call Recommend(), so the same
// profile gives the same numbers.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "estimator/core/trace.h"
#include "estimator/efficiency.h"
#include "estimator/throughput.h"
#include "search/catalog.h"
#include "search/mixed.h"
#include "search/search.h"

namespace cloudtune::search {

struct RecommendOptions {
  SpaceOptions space;
  ObjectiveOptions objective;
  CostOptions cost;
  double target_progress = 0;   // B0-steps the job must reach (required, > 0)
  double current_progress = 0;  // B0-steps made so far
  // Switch only when the objective improves by more than this fraction (and the switch pays).
  // When no candidate meets the deadline and budget, also the tolerance within which candidates
  // are about as late as the least-late one (their expected excess, or their expected hours and
  // cost), of which the best by the objective is proposed.
  double hysteresis = 0.03;
  double measure_s = 300;  // seconds one exploratory measurement runs
  // Seconds until the job decides again (0 = unknown: a one-off recommendation). A current
  // configuration that meets the deadline and whose own estimate overruns the budget by no more
  // than the hysteresis is kept while running it that much longer and then moving to a
  // configuration that meets both (the cheapest the search found) still meets them, margins
  // included: its overrun is still corrected by a later switch. A time-goal plan sits at the
  // budget's edge, and without this a job leaves its configuration whenever an estimate moves it a
  // cent over and takes it up again at the next.
  // Under a deadline (the cost goal), a configuration that misses the deadline on its own but costs
  // less for the same progress than the one chosen (SearchResult::deadline_bridges) runs while an
  // on-demand configuration that meets the deadline (the fallback), switched to after that stay,
  // still meets deadline and budget (margins included) even if the stay made no progress. The job
  // decides again every decide_again_s seconds (> 0 enables this; the stay is at least one such
  // window), so the pair is priced over the whole stay the fallback covers, the stay's progress
  // counted, and taken when its expected cost is lower than the chosen one's by more than the
  // hysteresis (a stay the job is already on is kept unless leaving it saves more than the
  // hysteresis of its own cost); and only while spot capacity is short (with all it wants, the job
  // would meet the deadline for less than the chosen one). The job rides out a gap in spot capacity
  // on a slower configuration instead of buying a fast on-demand cluster at the first gap.
  // A slower on-demand configuration (SearchResult::deadline_bridges_on_demand) may also run first
  // when an on-demand one that meets the deadline can still finish from where that stay leaves the
  // job, each part counted with the noise it sees (Predictor::steps_between): fewer GPUs at a small
  // batch while the noise is small, more at the larger batch it grows to. The same hysteresis
  // rules; the cheaper of the two plans is taken.
  double decide_again_s = 0;
  // Under a deadline, before a move to other hardware, observe the current hardware at a larger
  // batch first when the job has measured its type at one per-GPU batch only: in process, no
  // restart (Recommendation::in_process), the largest batch within the growth bound with at least
  // twice the samples per GPU per micro-step, for one measurement. Measured at one per-GPU batch,
  // the step time does not say how much of it is per sample and how much is fixed (launches, the
  // host), so every prediction at another per-GPU batch, and the choice between few GPUs at a large
  // batch and many at a small one, rests on the prior's split; a move that proves wrong costs a
  // second switch out of a deadline's slack, which does not come back.
  bool observe_batch_first = true;
  // Measure when the expected improvement exceeds explore_ratio × the measurement's cost.
  double explore_ratio = 3.0;
  // Exploration budget: measure only while the cost of all measurements so far plus this one
  // stays within this share of the job's expected total (spent + best predicted remaining), in
  // objective units. 0.04 leaves a margin below the 5% exploration-overhead target for the error
  // of the predicted remaining cost; 1 = no cap.
  double exploration_budget_share = 0.04;
  double spent = 0;              // objective units (USD or hours) the job has spent so far
  double exploration_spent = 0;  // of which on measurements (windows and switches into them)
  // Candidates considered for a measurement: the best this many by predicted objective (those
  // predicted to meet the deadline and budget first, then those expected to miss them least).
  int explore_candidates = 48;
  double measured_sigma = 0.03;    // log uncertainty of a measured configuration's step time
  double steps_sigma_floor = 0.0;  // added in quadrature to the steps prediction
  // Mixed clusters (search/mixed.h): when the spot capacity the job knows of
  // (space.spot_nodes_available) leaves a type short, also look for a cluster of up to this many
  // types, each with its own local batch, and report it (Recommendation::mixed). 0 = off; 2 or 3.
  int mixed_max_types = 2;
  // With a budget and no deadline, when nothing to be had now meets the budget, also consider
  // waiting out the spot shortage (a spot cluster pays nothing while it waits) and wait when that
  // meets the budget or overruns it less. false = never.
  bool wait_for_spot_over_budget = true;
  bool IsValid(std::string* error) const;
};

struct RecommendRequest {
  std::vector<core::Measurement> profile;  // measured configurations (instance_type set,
                                           // or "" = the current configuration's type)
  // Current gradient noise, measured at current's batch and options.current_progress (beyond
  // which it grows by EfficiencyModel::FromNoise's prior).
  std::optional<core::NoiseState> noise;
  std::optional<estimator::EfficiencyModel> efficiency;  // preferred over `noise` when set
  std::optional<Config> current;                         // what the job runs now
  bool relaunch_current = false;  // its nodes are gone (SearchProblem::relaunch_current)
  // The mixed cluster the job runs in place of `current`, when known (MixedSearchOptions::current:
  // kept unless an alternative saves more than the hysteresis while the capacity holds it).
  std::optional<MixedConfig> current_mixed;
  const Catalog* catalog = nullptr;  // nullptr = DefaultCatalog()
  RecommendOptions options;
  // Explicit hardware/batch candidates (e.g. the traced ones in a replay); empty = the space
  // generated from the catalog and options.space.
  std::vector<Config> candidates;
  // Options of the per-type throughput fits.
  estimator::ThroughputFitOptions throughput;
  // Bytes one step all-reduces (core::Snapshot::gradient_bytes; 0 = unknown): carries the
  // network the job measured to the types it has not (estimator::CrossTypeFitOptions).
  double gradient_bytes = 0;
};

struct Recommendation {
  enum class Action { kKeep, kSwitch, kMeasure };
  Action action = Action::kKeep;
  bool has_current = false;
  Evaluation current;   // predicted for the current configuration (when has_current)
  Evaluation proposed;  // the configuration to run next
  Evaluation best;      // best predicted configuration (exploit), = proposed unless measuring
  // What the job can take up without a restart (with has_current): the proposal when it keeps the
  // current hardware and is not a measurement; otherwise the best batch on the current hardware
  // (SearchResult::same_hardware) when it beats the current one beyond the hysteresis, or the
  // current configuration is beyond the space's memory limits (local batch, accumulation); else
  // the current one. A job that runs on until it is relaunched on other hardware tunes its batch
  // with it (see InProcessBatch).
  std::optional<Evaluation> in_process;
  std::string reason;                    // which constraint or term decided
  std::vector<Evaluation> alternatives;  // next-best configurations
  size_t evaluated = 0;                  // candidates evaluated
  // Of a measurement (objective units), when measuring. When no candidate meets the deadline or
  // budget: the expected reduction of the expected excess over them, converted to objective units
  // at the measurement's own cost per unit of excess.
  double expected_improvement = 0;
  double measurement_cost = 0;  // of that measurement (objective units)
  // When `proposed` misses the deadline on its own and runs only while a fallback covers the
  // deadline (see RecommendOptions::decide_again_s): the expected USD of it over that stay and of
  // the on-demand configuration that finishes after it. 0 otherwise.
  double bridge_cost = 0;
  Goal goal = Goal::kCost;
  std::string catalog_source;
  // What every cost figure counts: the catalog's unit (JSON "cost_unit": "usd", or "gpu_hours" on
  // machines no catalog prices; the "cost_usd" fields then hold GPU-hours).
  CostUnit cost_unit = CostUnit::kUsd;
  // The throughput model fitted per measured instance type (ThroughputModel::ToJson), as the
  // search used it.
  std::map<std::string, nlohmann::json> throughput_models;
  // The mixed-cluster search, when the known spot capacity left a type short (see
  // RecommendOptions::mixed_max_types): its best cluster, whether it beats the best single type
  // beyond its added uncertainty (then a job that can run mixed types should), and why.
  std::optional<MixedSearchResult> mixed;
  nlohmann::json ToJson() const;  // "schema": "cloudtune.recommendation/1"
  std::string ToTable() const;    // human-readable
};
const char* ActionName(Recommendation::Action a);  // "keep", "switch", "measure"

// What a running job can take up in process, without a restart (batch_switch_s):
// Recommendation::in_process, when `running` has its hardware (type, nodes, GPUs per node,
// purchase); it may be `running` itself (nothing to change). nullopt when `r` has no current
// configuration or was decided for other hardware. The one rule that the live job (the examples'
// --adaptive-batch) and the replay's job between its decisions follow.
std::optional<Config> InProcessBatch(const Recommendation& r, const Config& running);

// The entry point. Throws cloudtune::InputError on invalid options, an empty profile without a
// current configuration, a profile type not in the catalog, or neither noise nor efficiency.
Recommendation Recommend(const RecommendRequest& request);

// How to buy the nodes of a job's first launch, before anything is measured (`cloudtune
// launch-spec --start`; the replay launches its cloudtune job the same way). The step time is
// unknown, but spot and on demand run the same hardware at the same speed, so their costs compare
// per hour of work: spot when the objective is cost with no deadline, `type` sells spot, and an
// hour of work on spot, with the overhead its expected revocations add (EstimateRun at the
// catalog's rate for `nodes` nodes, with `cost`'s checkpoint and restart, saved on a notice when
// cost.notice_s covers a checkpoint), costs less than an hour on demand. On demand otherwise: the
// time goal does not buy spot's restarts, and whether a deadline leaves slack for them is unknown
// until the job's length is. A job launched on demand moves to spot later, when its measurements
// show it pays (a switch, CostOptions::switch_s).
struct LaunchAdvice {
  Purchase purchase = Purchase::kOnDemand;
  std::string reason;  // one line: which rule decided, with the hourly prices compared
};
LaunchAdvice AdviseLaunch(const InstanceType& type, int nodes, const ObjectiveOptions& objective,
                          const CostOptions& cost);

// ---- building blocks (used by Recommend and the replay) -----------------------------------------

// Step-time predictor from measured profiles: measured configurations use their measurement;
// every other configuration, on a measured type or not, comes from the one throughput model over
// instance types (estimator::FitCrossType with the catalog's hardware of each type): a measured
// type from its own fit, an unmeasured one projected from the best-measured type.
class ProfilePredictor {
 public:
  // `gradient_bytes`: as RecommendRequest::gradient_bytes.
  ProfilePredictor(const Catalog& catalog, const std::vector<core::Measurement>& profile,
                   double measured_sigma, const estimator::ThroughputFitOptions& fit = {},
                   double gradient_bytes = 0);
  Estimate StepTime(const InstanceType& t, const Config& c) const;
  bool Measured(const std::string& type) const { return model_.Measured(type); }
  // The model over the profile's instance types.
  const estimator::CrossTypeThroughputModel& model() const { return model_; }

 private:
  const Catalog& catalog_;
  double measured_sigma_;
  estimator::CrossTypeThroughputModel model_;
  std::map<core::ConfigKey, double> measured_;  // step time by key
};

// The decision given a search problem: exploit the best configuration, keep the current one
// (hysteresis), or measure an uncertain one whose expected improvement pays for the measurement.
// `measured(config)` says whether the configuration's step time is known from a measurement.
// `unlimited`: Search() of the same problem without its spot capacity limits, when the caller has
// it (a deadline bridge needs to know whether spot capacity is short; computed when needed if
// null).
Recommendation Decide(const SearchProblem& problem, const RecommendOptions& options,
                      const std::function<bool(const Config&)>& measured,
                      const SearchResult* unlimited = nullptr);

// Expected improvement E[max(0, incumbent − V) · 1{X <= max_factor}] of a log-normal
// V = median · X, log X ~ N(0, sigma²) (closed form). `max_factor` is the largest X at which the
// candidate still meets its deadline and budget (both scale with its step time as V does: 1 / the
// predicted miss ratio; infinity = no constraint): a measurement that shows it misses them
// improves nothing (constrained expected improvement, with the constraint and the objective
// moved by the same unknown step time).
double ExpectedImprovement(double incumbent, double median, double sigma,
                           double max_factor = std::numeric_limits<double>::infinity());

// The parts of the mixed cluster `r` proposes (search::PartsOf); empty when it proposes none.
std::vector<core::ClusterPart> MixedPartsOf(const Recommendation& r);

}  // namespace cloudtune::search
