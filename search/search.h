// The candidate space, objectives and constraints, and the search over them.
//
// A candidate is instance type × nodes × GPUs used per node × local batch × accumulation ×
// purchase option. The search evaluates candidates through a Predictor (step time and steps to the
// target, each with a log-normal uncertainty), so it does not depend on how those are obtained:
// recommend.h plugs in the fitted estimator models, the replay's oracle plugs in the true traces.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "estimator/core/trace.h"
#include "search/catalog.h"
#include "search/cost.h"

namespace cloudtune::search {

struct Config {
  std::string type;       // instance type name (catalog)
  int nodes = 1;          // instances
  int gpus_per_node = 1;  // GPUs used on each instance (<= the type's GPUs)
  int local_bsz = 1;      // samples per GPU per micro-step
  int accum_steps = 0;    // extra accumulation micro-steps per optimizer step
  Purchase purchase = Purchase::kOnDemand;

  int replicas() const { return nodes * gpus_per_node; }
  long long global_batch() const {
    return static_cast<long long>(replicas()) * local_bsz * (accum_steps + 1);
  }
  core::ConfigKey Key() const;  // the trace key (type, nodes, replicas, local_bsz, accum)
  // Same instances (type, nodes, GPUs per node, purchase): only the batch differs.
  bool SameHardware(const Config& o) const {
    return type == o.type && nodes == o.nodes && gpus_per_node == o.gpus_per_node &&
           purchase == o.purchase;
  }
  bool operator==(const Config& o) const {
    return SameHardware(o) && local_bsz == o.local_bsz && accum_steps == o.accum_steps;
  }
  std::string ToString() const;  // "4x g4dn.12xlarge (4 GPUs/node) spot, bsz 32x1"
};

// A log-normal estimate: median `value`, one standard deviation of log(value) `log_sigma`.
struct Estimate {
  double value = 0;
  double log_sigma = 0;
};

// What the search needs to know about a workload. Both functions must be thread-compatible and
// cheap (they are called once per hardware candidate / once per distinct global batch).
struct Predictor {
  // Seconds per optimizer step of `c` on `t` (purchase is irrelevant). value <= 0 or non-finite
  // marks the configuration as impossible (e.g. not measured in a trace-only predictor).
  std::function<Estimate(const InstanceType& t, const Config& c)> step_time;
  // Optimizer steps at `global_batch` to reach the target progress from the current progress.
  std::function<Estimate(double global_batch)> steps;
  // Optional: optimizer steps at `global_batch` from the share `from` to the share `to` of the
  // progress still to make (0 = now, 1 = the target; steps(b) is steps_between(b, 0, 1)). Lets a
  // plan of two configurations, one after the other, count what each does of the way, with the
  // noise that part of the run sees. Empty: such plans are not considered.
  std::function<Estimate(double global_batch, double from, double to)> steps_between;
};

struct SpaceOptions {
  int max_nodes = 16;              // quota: instances per configuration
  int max_gpus = 64;               // quota: GPUs over all instances
  int min_local_bsz = 8;           // smallest per-GPU batch tried
  int max_local_bsz = 256;         // largest per-GPU batch tried (memory limit)
  double local_bsz_factor = 2;     // local batches: min, min·f, min·f², ... ≤ max
  int max_accum_steps = 3;         // accumulation micro-steps 0..max
  long long max_global_batch = 0;  // 0 = no limit (samples per optimizer step)
  // Observe, then grow. When observed_batch > 0, no global batch above
  // max(max_batch_growth x observed_batch, the current configuration's) is proposed: beyond the
  // largest batch the job has run, the steps prediction rests on an extrapolation whose
  // uncertainty grows with log(B / observed_batch) (EfficiencyFitOptions::growth_sigma), so the
  // search grows the batch by at most this factor per decision and lets the job measure there
  // first. 4: two doublings, where the extrapolation's one-sigma spread is still under ~0.4 of the
  // steps' sensitivity to the noise ratio (at 64x it is 1.2, more than the whole effect). Explicit
  // candidates obey it too (at least the smallest is kept). >= 1, or 0 = no bound.
  double max_batch_growth = 4;
  // Largest global batch (samples) the job's efficiency model has observed; 0 = unknown (no
  // growth bound). Set by the caller (search::Recommend from EfficiencyModel::max_observed_batch).
  double observed_batch = 0;
  // The growth bound for a job now at `current_batch` samples (0 = none).
  long long GrowthBound(long long current_batch) const;
  // GiB of GPU memory per sample of local batch; 0 = unknown (only max_local_bsz limits).
  double memory_per_sample_gib = 0;
  bool allow_on_demand = true, allow_spot = true, allow_anchor = true;
  std::vector<std::string> types;  // restrict to these instance types (empty = every type)
  // Spot capacity that can be had now, in nodes per instance type (a type not listed: no limit).
  // A spot candidate needs all its nodes there, an anchor one all but its on-demand anchor.
  std::map<std::string, int> spot_nodes_available;
  // Spot candidates ignore spot_nodes_available: a shortage is waited out, at no cost to a spot
  // cluster (the cost goal without a deadline). Anchor candidates still need their spot nodes
  // (their on-demand anchor would pay for the wait).
  bool wait_for_spot = false;
  // GPUs used per node: powers of two up to the type's count, plus the count itself.
  bool IsValid(std::string* error) const;
};

using core::Goal;      // estimator/core/types.h
using core::GoalName;  // "cost", "time"
using core::ParseGoal;

struct ObjectiveOptions {
  Goal goal = Goal::kCost;  // minimise expected cost (USD) or expected time (hours)
  double deadline_h = 0;    // constraint: expected hours <= deadline (0 = none)
  double budget_usd = 0;    // constraint: expected cost <= budget (0 = none)
  // Margin on the deadline and budget for the part of a run the job cannot correct. The job
  // re-plans on what it measures, so an estimate that proves optimistic is corrected by a switch,
  // except in the last `uncorrectable_h` hours (a switch plus a measurement): that part must fit
  // at `constraint_sigmas` standard deviations of the candidate's log-normal estimate
  // (Evaluation::log_sigma) above it. 0 hours = the median estimate fits. Both >= 0.
  double uncorrectable_h = 0;
  double constraint_sigmas = 1.0;
  // Hours a correction takes (a switch; >= 0): the rule above lets a job correct an optimistic
  // estimate, and a correction is a switch, so under a deadline a run must also leave that long
  // before it, at its median and margin (0 = none).
  double correction_h = 0;
  bool IsValid(std::string* error) const;
  // How far hours and cost (log-normal with `log_sigma`), margin included, reach into the
  // deadline and the budget (<= 1 meets it; 0 when there is none), and the larger of the two.
  double DeadlineMiss(double hours, double log_sigma) const;
  double BudgetMiss(double hours, double cost, double log_sigma) const;
  double Miss(double hours, double cost, double log_sigma) const;
  // The expected excess over the deadline and the budget, each relative to its limit, summed:
  // E[(X / limit - 1)+] for X log-normal with median hours (cost) × the margin factor and
  // `log_sigma` (0 when there is no constraint). Candidates that miss rank by it, so the proposal
  // when none meets them is the one expected to be least late or over budget: past a deadline the
  // fastest, past a budget the cheapest. It grows with log_sigma at a fixed median, so an
  // uncertain candidate never ranks above an equally good certain one (a chance of meeting the
  // constraint bought with ignorance is not a reason to switch).
  double ExpectedExcess(double hours, double cost, double log_sigma) const;
};

// One evaluated candidate. Expected values include revocation overhead and the switch from the
// current configuration.
struct Evaluation {
  Config config;
  double step_time_s = 0;     // predicted seconds per optimizer step
  double throughput = 0;      // samples per second
  double steps = 0;           // optimizer steps to the target
  double goodput = 0;         // progress (B0-steps) per second of training
  double price_per_hour = 0;  // USD/h of the cluster
  double hours = 0;           // expected wall time to the target
  double cost = 0;            // expected USD to the target
  double switch_s = 0;        // switching time charged (0 when it is the current configuration)
  double revocations = 0;     // expected revocations
  double checkpoint_interval_s = 0;
  double log_sigma = 0;  // uncertainty of hours and cost (log scale)
  bool feasible = true;  // meets deadline and budget
  // Value of the objective (cost or hours) for ranking.
  double Objective(Goal g) const { return g == Goal::kCost ? cost : hours; }
};

struct SearchProblem {
  const Catalog* catalog = nullptr;
  Predictor predictor;
  SpaceOptions space;
  ObjectiveOptions objective;
  CostOptions cost;
  double remaining_progress = 0;    // B0-steps still to make (for goodput)
  const Config* current = nullptr;  // switching cost is charged for leaving it
  // Its nodes are gone (its spot nodes revoked, or refused on request): staying on it launches it
  // again, a switch (switch_s) like any move.
  bool relaunch_current = false;
  // When not empty, the hardware/batch candidates (purchase options are still expanded by the
  // space's allow_*); otherwise the space is generated from the catalog.
  std::vector<Config> candidates;
  int keep_top = 8;  // alternatives kept in SearchResult::top
};

struct SearchResult {
  std::vector<Evaluation> top;  // best first (feasible ones before infeasible ones)
  size_t evaluated = 0;         // candidates evaluated
  size_t feasible = 0;          // candidates meeting every constraint
  size_t excluded_by_deadline = 0, excluded_by_budget = 0;
  // Candidates better on the objective than top[0] but excluded by a constraint.
  size_t better_but_excluded = 0;
  // Observe, then grow, toward a plan. When no candidate within the growth bound
  // (SpaceOptions::max_batch_growth) meets the deadline and budget but a larger batch would, the
  // best such candidate is the plan (has_plan), and top[0] is the step toward it: the plan's
  // instances at the largest global batch within the bound (not above the plan's), carrying the
  // plan's expected hours, cost and uncertainty (the job grows the batch at its next decisions, as
  // it observes). Without this, a bound that keeps early decisions at small batches would make
  // every candidate miss, and the least-late fallback would buy the largest cluster.
  bool has_plan = false;
  Evaluation plan;
  // Candidates that miss a constraint on their median estimate but would meet it at two standard
  // deviations faster (cheaper): the best keep_top by the objective. Ranked after every feasible
  // candidate in top, they are where measuring can change the decision most (an unmeasured type
  // projected from other hardware, say), so exploration considers them too.
  std::vector<Evaluation> promising;
  // With the cost goal and a deadline: the candidates that miss the deadline on their own but meet
  // the budget, cheapest first (keep_top of them). Slower but cheaper for the same progress than
  // any that meets the deadline, one may run while a configuration that meets it can still finish
  // in time after that (RecommendOptions::decide_again_s).
  std::vector<Evaluation> deadline_bridges;
  // The same restricted to on-demand candidates, cheapest first (keep_top): a stay on them makes
  // the progress it is priced for (no revocation takes it back), so a plan may count it.
  std::vector<Evaluation> deadline_bridges_on_demand;
  // The best candidate on the current configuration's hardware (SearchProblem::current: same type,
  // nodes, GPUs per node and purchase; only the batch differs), by the same ranking as `top`; none
  // without a current configuration or when no such candidate is in the space.
  std::optional<Evaluation> same_hardware;
};

// Evaluates one candidate (NaN-free; infeasible when the predictor says impossible: hours = inf).
Evaluation Evaluate(const SearchProblem& p, const InstanceType& t, const Config& c,
                    const Estimate& step, const Estimate& steps);
// Convenience: evaluates `c` calling the predictor.
Evaluation Evaluate(const SearchProblem& p, const Config& c);
// Calls fn(type, config) for every hardware/batch candidate of the space (purchase = on-demand).
void ForEachCandidate(const Catalog& catalog, const SpaceOptions& space,
                      const std::function<void(const InstanceType&, const Config&)>& fn);
// Calls fn(config) for every hardware/batch candidate of instance type `type` that the search of
// `p` considers: p.candidates, or else the catalog's configurations of p.space, within the growth
// bound of p.current's batch (SpaceOptions::GrowthBound). Purchase as listed (on-demand from the
// catalog).
void ForEachCandidateOfType(const SearchProblem& p, const std::string& type,
                            const std::function<void(const Config&)>& fn);
// The best candidates by the objective under the constraints.
SearchResult Search(const SearchProblem& p);
// Pareto front of (expected hours, expected cost) over the space, sorted by hours.
std::vector<Evaluation> ParetoFront(const SearchProblem& p);

// ---- unmeasured instance types ----------------------------------------------------------------
// Training TFLOPS of an instance (GPUs × the GPU's best-known training TFLOPS; 0 = unknown).
double InstanceTflops(const Catalog& c, const InstanceType& t);
// FLOPP (DeepVM): TFLOPS per USD-hour at the purchase option's price (0 when TFLOPS unknown).
double Flopp(const Catalog& c, const InstanceType& t, Purchase p);
// (What a type that was never measured would do is the throughput model's to say:
// estimator/throughput_types.h, fed by HardwareOf in catalog.h.)

}  // namespace cloudtune::search
