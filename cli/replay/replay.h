// Replay: simulates a training job over real measured traces and compares the online policy
// (cloudtune: the tuner runtime a live job runs, plugin/runtime/runtime.h, fed the job's own
// noisy measurements) with an oracle and baselines, with seeded measurement noise and
// revocations. It sits above the runtime, like a job does.
//
// Scenario file (JSON, paths relative to the file's directory; see data/scenarios/README.md):
// {
//   "schema": "cloudtune.scenario/1",
//   "name": "pollux-imagenet-g4dn",
//   "gpu_extra": [ {"gpu_model": "X", ...gpu_specs.csv columns} ], // optional GPU models (blank
//                                                               // figures allowed: unknown)
//   "catalog_extra": [ {catalog CSV columns as keys ...} ],     // optional rows added to the
//                                                               // default catalog
//   "traces": [                                                 // the true step times
//     {"instance_type": "g4dn.12xlarge", "csv": ["PATH.csv", ...]},   // trace CSVs (DESIGN §5)
//     {"instance_type": "p3.8xlarge", "gavel": {"file": "PATH.json", "gpu": "v100",
//       "model": "ResNet-50", "nodes": 1, "replicas": 4}}               // Gavel steps/s
//   ],
//   "noise": {"validation_csv": "PATH.csv", "base_batch": 200},  // gradient noise vs progress
//                                    (read as the efficiency fit reads it: each row's statistics
//                                    are averages over its interval, placed at its midpoint)
//   "target_progress": 0,            // B0-steps; 0 = the last progress of the validation trace
//   "gradient_bytes": 102228128,     // optional: bytes a step all-reduces (the model's gradients,
//                                    // 4 x parameters in FP32), as the live plugin reads them off
//                                    // the model; given to the cloudtune policy only. 0 = unknown
//   "start": {"instance_type": "...", "nodes": 1, "gpus_per_node": 4, "local_bsz": 20,
//             "accum_steps": 0},     // the job's first configuration (on demand)
//   "objective": {"goal": "cost", "deadline_h": 0, "budget_usd": 0},
//   "seeds": [1, 2, 3],
//   "step_noise_sigma": 0.05,        // log-normal noise of one measurement window's mean
//   "decision_interval_s": 1800,     // the policies re-decide this often
//   "measure_s": 300,                // an exploratory measurement window
//   "cost": {"restart_s": 120, "checkpoint_s": 30, "anchor_checkpoint_s": 5, "switch_s": 180,
//            "warning_s": 120},  // the cloud's warning before a spot revocation (AWS: 2 minutes)
//   "validation": {"128": "validation-128.csv", "256": "...", ...},  // optional measured truth
//   "carry": "metric",               // optional with "validation": metric | progress, the
//                                    // measured value carried across batch changes
//   "metric_mode": "max",            // optional with "validation": max | min, whether a higher
//                                    // or a lower validation metric is better (default: read
//                                    // from the runs, each run's last row against its first)
//   "target_metric": 0.94,           // optional with "validation": the carried value to reach,
//                                    // in the traces' units; default the best value every run
//                                    // reaches
//   "spot": {"reading": "count",     // optional real spot capacity: count | zero-is-up
//            "offset_h": 24,         // seed k starts k x offset_h into the traces
//            "traces": {"p3.2xlarge": "availability.json",  // one zone, or zones by name:
//                       "g4dn.12xlarge": {"us-west-2a": "a.json", "us-west-2b": "b.json"}}}
// }
// Measured truth ("validation"): the steps a configuration takes come from the runs measured at
// each batch (MeasuredSteps: the best validation metric reached, or with "carry": "progress" the
// runs' own progress column, is the state carried across batch changes; batches between measured
// ones interpolated in log B; configurations whose global batch lies outside the measured batches
// are not offered). Progress, as the policies see it, is counted in steps of the smallest
// measured batch to the value reached; the target is that value. Without it, progress follows the
// plain theory's gain from the noise trace (a model). Spot capacity ("spot"): a type with a trace
// can only get the spot nodes the trace says are available; a running spot cluster is revoked when
// the capacity drops below what it holds (roll back to the last checkpoint, restart_s), and waits,
// paying only its on-demand anchor, until the capacity is back. A type with traces of several
// zones (SpotMarket) offers a request the zone with the most nodes; a cluster holds its nodes in
// the zone it launched in, and where that zone loses them and another has them it relaunches there
// (restart_s; Decision::zone_failover), else waits. The oracle has a spot configuration in each
// zone, on that zone's capacity, and pays a relaunch to move between them. A job that waits is
// not running: a window it spends waiting measures nothing (no step time, no gradient statistics),
// and a window that measures (or follows a switch) starts when it runs, the policy being asked
// again after a decision interval of waiting (after each minute of it for a policy that decides
// again on a revocation notice: Decision::redecide_on_revocation). Types without a trace keep the
// catalog's revocation rate. Revocations: a spot/anchor cluster is revoked when its cumulative
// hazard (catalog rate × nodes × training time) crosses the next Exp(1) threshold; the thresholds
// depend on the seed only, so all policies face the same revocation luck (common random numbers). A
// revocation rolls back to the last checkpoint (every Young/Daly interval of the running
// configuration, carried across decision windows; a switch checkpoints) and costs restart_s.
// The cloudtune policy decides fully every decision_interval_s (and after a measurement, a move to
// other hardware, a revocation under a deadline); in between it takes up a new batch its runtime
// proposes for the hardware it runs, in process (see data/scenarios/README.md).
// Measurement noise is drawn per policy. Gavel's throughputs are read as aggregate worker-steps/s
// at per-GPU batch b: the optimizer step time of R replicas is R / steps_per_s (no sync split:
// sync_time 0). Only configurations with an even placement (replicas = nodes × GPUs per node) are
// candidates.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/replay/measured_steps.h"
#include "cli/replay/spot_trace.h"
#include "estimator/core/trace.h"
#include "plugin/runtime/runtime.h"
#include "search/catalog.h"
#include "search/recommend.h"
#include "search/search.h"

namespace cloudtune::replay {

using namespace ::cloudtune::search;  // the replay speaks the search's vocabulary

struct Scenario {
  std::string name;
  Catalog catalog;
  std::vector<core::Measurement> traces;      // true step times (instance_type set)
  std::vector<Config> candidates;             // traced configurations (purchase = on-demand)
  std::vector<core::NoiseObservation> noise;  // by progress (ascending)
  double base_batch = 1;
  double target_progress = 0;
  // Bytes one step of the job all-reduces (its model's gradients; 0 = not given): what the live
  // plugin reads off the model, given to the cloudtune policy as a job knows it.
  double gradient_bytes = 0;
  Config start;
  ObjectiveOptions objective;
  CostOptions cost;  // the job's costs (cost.notice_s stays 0: baselines do not watch notices)
  // The cloud's warning before it takes a spot node back, seconds (AWS's two minutes; 0 = none).
  // The cloudtune policy watches for it as the live runtime does (CLOUDTUNE_PREEMPTION_URL) and
  // saves its state on it when the warning, less its polling interval, covers a checkpoint; the
  // baselines restart from their last periodic checkpoint.
  double warning_s = 120;
  std::vector<uint64_t> seeds{1};
  double step_noise_sigma = 0.05;
  double decision_interval_s = 1800;
  double measure_s = 300;
  std::shared_ptr<const MeasuredSteps> measured;  // measured truth of the steps (optional)
  double target_metric = 0;                       // with `measured`
  std::map<std::string, SpotMarket> spot;         // real spot capacity by instance type (zones)
  SpotReading spot_reading = SpotReading::kCount;
  double spot_offset_s = 86400;  // seed k starts k x this into the spot traces
  // Progress (B0-steps) of a run that has reached `metric` (with `measured`).
  double ProgressAt(double metric) const;
  // The gradient statistics at `progress` (geometric between rows, the ends held): of the noise
  // trace, or, with `batch` > 0 and measured runs, of the run whose batch is nearest to `batch`
  // in log (what a job at that batch measures).
  core::NoiseState NoiseAt(double progress, double batch = 0) const;
  // The rows NoiseAt reads (by progress, ascending): the noise trace's, or, with `batch` > 0 and
  // measured runs, those of the run whose batch is nearest to `batch` in log.
  const std::vector<core::NoiseObservation>& NoiseRows(double batch = 0) const;
  // With "validation": the gradient statistics each measured run recorded, by its batch.
  std::map<int, std::vector<core::NoiseObservation>> noise_by_batch;
  // log |G|^2 and log tr(Sigma) of each row of `noise` and of each run of `noise_by_batch` (0 where
  // a value is not positive), for NoiseAt's geometric interpolation, which runs in the
  // simulation's inner loop: filled by the parser (IndexNoiseLogs; call it again after changing
  // the rows). Rows without logs of their count (a scenario built by hand) are read without.
  std::vector<std::array<double, 2>> noise_logs;
  std::map<int, std::vector<std::array<double, 2>>> noise_logs_by_batch;
  void IndexNoiseLogs();
};

// Throws cloudtune::InputError "FILE: FIELD: what" on a malformed scenario or trace.
// `carry` ("metric" or "progress"; "" = the file's) overrides the scenario's "carry" where it
// has measured runs.
Scenario LoadScenario(const std::string& path, const std::string& carry = "");
Scenario ParseScenario(const nlohmann::json& j, const std::string& name,
                       const std::string& base_dir);

struct PolicyResult {
  std::string policy;
  double cost = 0;              // USD
  double makespan_h = 0;        // hours to reach the target
  double exploration_cost = 0;  // USD spent in measurement windows and switches into them
  int switches = 0;
  int revocations = 0;
  int zone_failovers = 0;  // of the revocations, those it relaunched from in another zone at once
  int measurements = 0;
  bool finished = true;                         // reached the target before the simulation limit
  bool deadline_met = true, budget_met = true;  // over the whole run (true when there is none)
  double waited_h = 0;     // hours without the spot capacity its configuration needs
  int mixed_switches = 0;  // switches into a mixed cluster (several instance types)
  double mixed_hours = 0;  // hours it ran mixed clusters
  // The oracle only: its bound (OracleResult::cost_lower, makespan_lower_h): the cost goal's is
  // cost_lower (USD), the time goal's makespan_lower_h (hours).
  double cost_lower = 0, makespan_lower_h = 0;
  int levels = 0;  // the oracle only: the progress levels it was solved at
  // "HOURS h: CONFIG" at each change of configuration (the oracle only when its options record it)
  std::vector<std::string> schedule;
  std::vector<core::ConfigKey> configs_run;  // the configurations it ran (simulated policies)
  // Sets deadline_met and budget_met from finished, makespan_h and cost.
  void Score(const ObjectiveOptions& o) {
    deadline_met = o.deadline_h <= 0 || (finished && makespan_h <= o.deadline_h);
    budget_met = o.budget_usd <= 0 || (finished && cost <= o.budget_usd);
  }
};

// What a job running in the replay has seen: the cloudtune policy's only inputs.
struct JobView {
  std::vector<core::Measurement> measured;  // its own noisy measurements, per configuration
  core::NoiseState noise;                   // gradient statistics at its current progress
  Config current;                           // what it runs now (the type it reports)
  // The mixed cluster it runs instead of `current`, if it followed a mixed recommendation (the
  // live snapshot has one type: `current` stays the last single-type configuration).
  std::optional<MixedEvaluation> mixed;
  double progress = 0;                                // B0-steps made
  double hours = 0, cost_usd = 0;                     // spent so far
  double exploration_hours = 0, exploration_usd = 0;  // of which on measurements
  // Spot nodes per type it knows it can get now (requests refused, revocation notices).
  std::map<std::string, int> spot_nodes_available;
  // The gradient statistics it measured along its run (one per simulated minute of training
  // between the trace's first and last rows, at the batch it ran; at most 64, thinned as the live
  // runtime thins them, ThinNoiseHistory): with two batches or more the efficiency drift is fitted.
  std::vector<core::NoiseObservation> noise_history;
  // Its spot exposure and the revocations it has seen, per type.
  std::map<std::string, core::SpotExposure> spot_exposure;
  double gradient_bytes = 0;  // what its model all-reduces a step (Scenario::gradient_bytes)
};
// The runtime setup of the scenario's job (objective, target, catalog, traced configurations as
// the candidates): the cloudtune policy constructs the runtime a live job constructs.
runtime::RuntimeSetup CloudtuneSetup(const Scenario& s);
// The seconds of the scenario's revocation warning the cloudtune job can act on: it watches for
// notices at the live runtime's default polling interval.
double CloudtuneNoticeS(const Scenario& s);
// The configuration the cloudtune job is launched in: the start, bought as `cloudtune launch-spec
// --start` advises (search::AdviseLaunch, with the job's objective and costs). On spot it starts
// elastically, as launch-spec writes it (at least one node): on the `spot_nodes` the market has at
// launch when they are fewer than the start's, at least one (when that configuration is traced).
Config CloudtuneLaunch(const Scenario& s, int spot_nodes);
// Whether `c` (any purchase) is the start on fewer of its nodes, on a type with a spot capacity
// trace: where an elastic spot launch may start (the cloudtune job's, and the oracle's for free,
// when the market has fewer than the start's nodes at time 0).
bool FewerOfTheStartsNodes(const Scenario& s, const Config& c);
// One decision of the cloudtune policy: the runtime's fit-and-search on what the job has seen.
search::Recommendation CloudtuneDecide(const runtime::Runtime& rt, const JobView& job);

class Oracle;
// Runs every policy on one seed. Deterministic for (scenario, seed).
//  cloudtune          the runtime a live job runs (CloudtuneDecide), launched in the start
//                     configuration as AdviseLaunch buys it (CloudtuneLaunch); it
//                     runs the mixed cluster the recommendation proposes (Recommendation::mixed,
//                     when the spot capacity leaves a type short; its truth composed from the
//                     measurements, cli/replay/mixed_truth.h, else not offered), keeps a running
//                     one while the proposal has the same hardware, and otherwise runs the
//                     single-type proposal;
//  cloudtune-one-type the same runtime with mixed clusters off (scenarios with spot capacity
//                     traces and several traced types only): what mixing saves;
//  fixed-on-demand    the start configuration throughout;
//  fixed-spot         the start configuration on spot, waiting out shortages in the zone it was
//                     launched in and restarting;
//  managed-spot       the start configuration on spot, failing over to another zone of its type
//                     that has the nodes, and to on demand at a decision when no zone has them,
//                     back when they return (SkyPilot's managed spot);
//  uniform-progress   deadline scenarios only: the start configuration on spot while progress is
//                     at least the uniform line target × elapsed / deadline and on demand when it
//                     falls behind or when the time left only just covers the work left on demand
//                     (Can't Be Late, NSDI'24), its speed measured from its own progress;
//  cheapest-spot, fastest-first, deepvm-flopp (DeepVM's FLOPP ranking), pollux-goodput (batch and
//                     workers tuned for goodput on the start type, on demand);
//  informed-greedy    the runtime's Decide() with true step times and steps (no exploration):
//                     what a perfect model deciding online would do;
//  hindsight-fixed    the best single configuration in hindsight (cli/replay/oracle.h);
//  oracle             the hindsight-optimal schedule (cli/replay/oracle.h) within the deadline,
//                     or without one within twice the time the slowest other policy took
//                     (OracleHorizon); built from `oracle` when given.
//                     When no schedule it can follow meets the deadline and budget but its lower
//                     bound finds one, its progress levels are too coarse to tell whether they can
//                     be met: it is solved again at twice the levels, up to kMaxOracleRefinement
//                     times those it was given (PolicyResult::levels says which).
std::vector<PolicyResult> RunReplay(const Scenario& s, uint64_t seed,
                                    const Oracle* oracle = nullptr);
// How much finer than it was given the oracle is solved, at most, when its levels cannot tell
// whether the deadline and budget can be met (RunReplay, "oracle").
inline constexpr int kMaxOracleRefinement = 8;

}  // namespace cloudtune::replay
