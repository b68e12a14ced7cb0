// The hindsight-optimal oracle of the replay: dynamic programming over decision windows ×
// progress levels × configurations (type, nodes, GPUs per node, batch, purchase, zone), with the
// spot capacity of the whole run known in advance. It minimises cost subject to the deadline (or
// time subject to the budget, for the time goal) under the replay's truth: measured step times, the
// measured steps to the target (or the noise trace's progress) and the spot traces.
//
// The model and its discretisation (what a policy could do that the oracle cannot, or the reverse):
// - Decisions at every `window_s` (default: the scenario's decision interval, or its measurement
//   window when spot capacity traces make the capacity change within minutes), from time 0. A
//   switch to another configuration spends the first switch_s (other hardware) or batch_switch_s
//   (same instances, another batch) of the window without progress, paid at the new price; the
//   window still ends on the grid (the replay's policies add the switch to the clock instead).
//   Checkpoints take the share ckpt / (tau + ckpt) of the training time (tau: Young/Daly interval
//   of the catalog's rate), paid, and also inside the window.
// - Spot (and the spot workers of an anchor cluster) of a type with a capacity trace is chosen only
//   for windows in which the trace has the capacity for the whole window: hindsight dodges every
//   revocation. A type sold in several zones has each spot configuration once per zone, on that
//   zone's trace; moving to another zone is a switch to other hardware (a relaunch). Types without
//   a trace are never revoked (catalog rates are ~1e-4/h: in the oracle's favour). Where capacity
//   traces exist the oracle may also idle (pay nothing, make no progress); coming back costs
//   switch_s once the job has run.
// - Progress (B0-steps) is kept on `levels` equally spaced levels. The schedule the oracle reports
//   comes from a recursion in which each state carries the exact position (between levels) of the
//   schedule that reached it; a window's progress from there is interpolated between the tables of
//   its level and the next, and each level keeps its cheapest state. That schedule is then followed
//   with the exact progress of every window: its cost and makespan are those of a schedule a
//   policy could follow (an upper bound of the optimum of this model), and they hardly depend on
//   the levels. (Where the interpolation was too hopeful and the schedule does not finish, the
//   recursion that rounds each window's progress down to a level, which never overestimates,
//   gives the schedule instead.) The recursion rounding each window's progress up gives a bound
//   of what the objective can reach: for the cost goal no schedule of this model costs less than
//   `cost_lower`; for the time goal none within the budget finishes sooner than
//   `makespan_lower_h`. That bound needs fine levels. The gap between it and the schedule's
//   figure bounds how far the schedule can be from the optimum of this model.
// - Configurations: the traced ones (purchase on demand, spot, and anchor + spot workers for
//   multi-node types with a spot price). Within one set of instances, a batch that is never the
//   fastest to progress at any level is dropped (it could only save a batch switch).
// - The search skips the states that cannot lead to a better finish (OracleOptions::prune), by a
//   lower bound of the cost to go that holds for every schedule of the model: exact, not a
//   heuristic.
// - The job starts in the start configuration, launched on demand or on spot (as the fixed-spot
//   baseline is), at no cost: at time 0, or, having waited for spot capacity from time 0, when the
//   capacity comes (the simulator launches a job that has not run yet without a restart). On a
//   type with a capacity trace it may start on spot on fewer of the start's nodes at no cost too,
//   but only when the market has fewer than the start's nodes at time 0, as the cloudtune job's
//   elastic launch does (CloudtuneLaunch); otherwise moving onto fewer nodes is a switch. The run
//   must finish within `horizon_h` (the deadline when there is one; see OracleHorizon).
// - Known limit: capacity that flips within a window (the 1-node traces tick every 32 s) is usable
//   by a policy minute by minute but by the oracle only for whole windows, so there a policy that
//   rides the flips (fixed-spot) can cost less than the oracle. Without a deadline the replay's
//   horizon leaves the oracle room to wait for the next window; what remains is the flips within a
//   window the oracle cannot use at all.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cli/replay/replay.h"

namespace cloudtune::replay {

struct OracleOptions {
  int levels = 600;     // progress levels (>= 2)
  double window_s = 0;  // decision window, seconds; 0 = decision_interval_s (measure_s with traces)
  double horizon_h = 0;  // latest finish, hours (> 0, or the scenario's deadline; OracleHorizon)
  // Report the schedule as text (OracleResult::schedule); it is followed either way.
  bool schedule = false;
  // Threads that build the tables (0 = one per core); the tables do not depend on it.
  unsigned threads = 0;
  // Skip the states from which no schedule can count: each window's cost plus a lower bound of the
  // cost from where it lands (the cheapest path through the levels, capacity and horizon ignored)
  // beyond the best finish so far (the cost goal) or the budget (the time goal). Under the cost
  // goal the lower bound's recursion, run after the schedule, also prunes against the schedule's
  // cost, which it cannot exceed. The optimum and its schedule do not depend on it; only the time
  // does.
  bool prune = true;
  bool IsValid(std::string* error) const;
};

struct OracleResult {
  bool finished = false;            // a schedule reaches the target within the horizon (and budget)
  double cost = 0, makespan_h = 0;  // the schedule it can follow, followed exactly
  // The recursion rounding progress up: the objective's bound (the cost goal: no schedule of the
  // model costs less than cost_lower; the time goal: none within the budget finishes sooner than
  // makespan_lower_h). The other figure is that bound's schedule's, not a bound.
  double cost_lower = 0, makespan_lower_h = 0;
  // The best single configuration in hindsight (switched to at time 0; 0 cost when none finishes).
  double fixed_cost = 0, fixed_makespan_h = 0;
  std::string fixed_config;
  // Changes of configuration (idle included) after the first window, as a policy's are counted.
  int switches = 0;
  std::vector<std::string> schedule;  // with OracleOptions::schedule: "HOURS h: CONFIG" per change
};

// The horizon a replay gives the oracle: the deadline when there is one; otherwise twice
// `slowest_h`, the latest finish among the policies replayed (at least one decision interval).
// Without a deadline the horizon is no part of the problem, only the end of the recursion. As long
// as the slowest policy only, it made the window grid (capacity that comes back within a window
// is used from the next one) cost the oracle more than a spot policy that finished as late.
double OracleHorizon(const Scenario& s, double slowest_h);

// What one window does in the oracle's model (exposed for tests).
class WindowModel {
 public:
  static constexpr double kChunkS = 60;  // the replay's simulation step (Gain model, capacity)
  WindowModel(const Scenario& s, double window_s);
  // Progress (B0-steps) after `train_s` training seconds on `c` from progress `u`; when the target
  // is reached, *finish_s (else -1) is the training seconds it took.
  double Advance(const Config& c, double u, double train_s, double* finish_s) const;
  // The same from a known MetricAt(u) (the tables ask for each level's once, not per
  // configuration).
  double Advance(const Config& c, double u, double metric_u, double train_s,
                 double* finish_s) const;
  // With measured truth, the carried value whose progress is u (else 0).
  double MetricAt(double u) const;
  // The progress of a job at its start (measured truth: that of the start metric).
  double StartProgress() const;
  // Training seconds in a window that starts with `switch_s` of switching on `c`.
  double TrainSeconds(const Config& c, double switch_s) const;
  // Seconds of the window spent checkpointing per training second on `c`.
  double CheckpointShare(const Config& c) const;
  double window_s() const { return window_s_; }

 private:
  const Scenario& s_;
  double window_s_;
  std::map<core::ConfigKey, double> step_;  // true seconds per optimizer step
};

class Oracle {
 public:
  // Builds the seed-independent tables (progress per window for every configuration and level).
  Oracle(const Scenario& s, const OracleOptions& o = {});
  ~Oracle();
  // The optimum for one seed (its spot traces' offset), within `horizon_h` (0: the options').
  // `give_up` > 0, the time goal only: the schedule it can follow is searched for no later than
  // `give_up` × the lower bound's makespan, and counts as not found beyond (a quick test of
  // whether these levels resolve the run; the search stops at its first finish, so a schedule
  // found within that time is the one the full search finds). `best_fixed` false: OracleResult's
  // fixed_* are left empty (their search is a recursion per configuration over the whole horizon).
  OracleResult Solve(uint64_t seed, double horizon_h = 0, double give_up = 0,
                     bool best_fixed = true) const;
  // Configurations kept after dropping the dominated batches (purchases and zones included).
  size_t configurations() const;
  const OracleOptions& options() const { return o_; }
  // The same oracle at twice the progress levels, built on first use and kept (thread-safe).
  const Oracle& Refined() const;

  struct Tables;  // the seed-independent tables (oracle.cpp)

 private:
  const Scenario& s_;
  OracleOptions o_;
  double Horizon(double horizon_h) const;  // the one asked for, within the deadline
  static void BoundCostToGo(Tables* t);    // fills Tables::to_go
  std::unique_ptr<Tables> t_;
  mutable std::mutex refine_mu_;
  mutable std::unique_ptr<Oracle> refined_;
};

}  // namespace cloudtune::replay
