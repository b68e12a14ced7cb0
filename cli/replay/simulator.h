// The replay's simulator (internal to cli/replay): runs one policy through one scenario and seed
// against the measured truth, spot capacity and revocations (see replay.h for what is simulated).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/replay/mixed_truth.h"
#include "cli/replay/replay.h"
#include "estimator/core/error.h"
#include "estimator/efficiency.h"
#include "plugin/runtime/options.h"

namespace cloudtune::replay::detail {

constexpr double kLimitHours = 20000;  // a policy that has not finished by then is cut off
// The job's gradient statistics are recorded once per this many simulated seconds of training.
constexpr double kNoiseRecordS = 60;
// Between decisions the policy is asked again only once the measured noise scale has moved by this
// factor since it last decided: the best batch follows the noise scale, and the traces' batch grid
// steps by about sqrt(2) (45, 64, 91, 128, ...), so a smaller move cannot change it by a step. (A
// live job asks at every refit; this keeps the replay fast.)
const double kRetuneNoiseFactor = std::sqrt(2.0);

// ---- simulation -------------------------------------------------------------------------------

struct Observation {
  double sum = 0;
  int n = 0;
  double sync = 0;
};

struct Decision {
  Decision() = default;
  Decision(const Config& c, bool m) : config(c), measure(m) {}
  Config config;
  bool measure = false;
  // How long a measuring window lasts: `measure_steps` steps of the configuration (at its true
  // step time; the warm-up included), or sooner once it spans `measure_seconds` and holds
  // `min_steps` steps (0 = by steps only), i.e. the job's own cadence; 0 steps = the scenario's
  // measure_s. A policy with its own cadence (measure_steps > 0) also decides again that soon
  // after every switch, as the live job does: it measures each configuration it runs.
  int measure_steps = 0;
  double measure_seconds = 0;
  int min_steps = 0;
  std::string why;  // what decided (shown in the schedule)
  // A revocation by the spot capacity ends the window and the policy decides at once (on the
  // revocation notice), and so does each record spent waiting for spot nodes the market does not
  // have (after a switch to them, or after such a revocation); otherwise it waits for the capacity
  // until its next decision.
  bool redecide_on_revocation = false;
  // Where its spot nodes are revoked and another zone of the type has them, the job relaunches
  // there (a restart) instead of waiting for its own zone (SkyPilot's managed spot; what a
  // launcher does that tries every zone). False: it waits for the zone it was launched in.
  bool zone_failover = true;
  // The checkpoint interval the policy chose (seconds; 0 = the Young/Daly interval of the
  // catalog's revocation rate).
  double checkpoint_interval_s = 0;
  // Seconds of a revocation's warning the policy can act on (search::CostOptions::notice_s; 0 = it
  // does not watch for notices). When they cover the running configuration's checkpoint, the job
  // saves its state on the notice and a revocation loses no work.
  double notice_s = 0;
  // A mixed cluster to run instead of `config` (its parts and per-part local batches); `config`
  // stays the single-type configuration the job reports as its own (the live snapshot has one
  // type).
  std::optional<MixedEvaluation> mixed;
  Config single;  // with `mixed`: what runs when the replay cannot run the mixed cluster
  // Between its decisions the job also acts, in process, on a new batch for the hardware it runs
  // (batch_switch_s): the policy is asked again every `retune_s` seconds (0 = never) once the
  // measured noise scale has moved by kRetuneNoiseFactor since it last decided, and only such a
  // proposal is taken up; other hardware, a measurement or a mixed cluster wait for the next
  // decision.
  double retune_s = 0;
  // What the job takes up in process between decisions (search::InProcessBatch: the proposal when
  // it keeps the hardware, else the best batch on the hardware it runs); nullopt = nothing. Only
  // read with retune_s > 0.
  std::optional<Config> in_process;
};

// What one window runs: its true step time, prices and exposure (a single-type configuration or
// a mixed cluster).
struct Running {
  double step_time = 0, sync_time = 0;
  double price = 0;          // USD per hour while it runs
  double waiting_price = 0;  // USD per hour while it waits for spot capacity
  double hazard_rate = 0;    // revocations per hour drawn from the catalog (parts without a trace)
  double catalog_rate = 0;   // the catalog's revocation rate of all parts (the job's checkpoints)
  double checkpoint_s = 0, tau_s = 0;
  double notice_s = 0;  // Decision::notice_s
  double batch = 0;     // global batch
  // The spot nodes of each part that has any: the job's exposure. A part with a capacity trace
  // holds them while the trace has them; the catalog's revocations (hazard_rate) are charged to
  // the first part without one.
  struct SpotPart {
    std::string type;
    int nodes = 0;
    const SpotMarket* market = nullptr;  // null: no trace
  };
  std::vector<SpotPart> spot;
  // The hooks' step time is recorded in the job's profile under `key` (one hardware only: the
  // profile is per single-type configuration).
  bool observed = true;
  core::ConfigKey key;
  bool redecide_on_revocation = false;  // Decision::redecide_on_revocation
  bool zone_failover = true;            // Decision::zone_failover
};

class Simulator {
 public:
  Simulator(const Scenario& s, uint64_t seed, const std::string& policy)
      : s_(s),
        rng_(seed * 1000003ULL + std::hash<std::string>()(policy)),
        revocation_rng_(seed * 7919ULL + 17),
        spot_offset_s_(static_cast<double>(seed) * s.spot_offset_s),
        mixed_truth_(s.catalog, s.traces) {
    next_revocation_ = std::exponential_distribution<double>(1.0)(revocation_rng_);
    for (const auto& m : s.traces) truth_[m.key] = &m;
    if (s.measured) metric_ = last_ckpt_metric_ = s.measured->StartMetric();
  }

  // Spot nodes of `type` the trace says can be had now (a large number where there is no trace).
  int SpotAvailable(const std::string& type) const {
    auto it = s_.spot.find(type);
    if (it == s_.spot.end()) return 1 << 20;
    return it->second.Available(t_h_ * 3600, 1 << 20, s_.spot_reading, spot_offset_s_);
  }
  double metric() const { return metric_; }

  const core::Measurement* Truth(const Config& c) const {
    auto it = truth_.find(c.Key());
    return it == truth_.end() ? nullptr : it->second;
  }

  core::NoiseState NoiseAt(double progress) const { return s_.NoiseAt(progress); }

  // Whether the replay can run the mixed cluster `m`: its step time composes from the
  // measurements (cli/replay/mixed_truth.h) and its global batch lies within the measured steps.
  bool CanRun(const MixedEvaluation& m) const {
    if (!mixed_truth_.Step(m.config, m.local_bsz)) return false;
    const double b = MixedBatch(m);
    return !s_.measured || (b >= s_.measured->min_batch() && b <= s_.measured->max_batch());
  }
  // Runs `policy` to the target.
  PolicyResult Run(
      const std::string& name,
      const std::function<Decision(Simulator&, const Config& cur, bool first)>& policy) {
    PolicyResult r;
    r.policy = name;
    // Every adaptive policy starts where the user launched the job (cloudtune lives inside it):
    // the first window runs the start configuration; it is not counted as exploration.
    Decision d = policy(*this, s_.start, true);
    cur_ = d.config;
    Record(d, &r);
    bool measuring = d.measure, first = true, switched = true;
    double since_decision_s = 0;    // since the last decision that could change the hardware
    bool hardware_switched = true;  // the last switch changed the hardware (or measures)
    double decided_noise = 0;       // the noise scale the policy last decided on
    while (progress_ < s_.target_progress && t_h_ < kLimitHours) {
      const bool soon = measuring || (switched && d.measure_steps > 0);
      double window = soon ? MeasureWindow(d) : s_.decision_interval_s;
      if (!soon && d.retune_s > 0 && !mixed_ && !waiting_ &&
          since_decision_s < s_.decision_interval_s)
        window = std::min(d.retune_s, s_.decision_interval_s - since_decision_s);
      const double c0 = cost_, h0 = t_h_;
      Running running = Describe(cur_, mixed_);
      running.redecide_on_revocation = d.redecide_on_revocation;
      running.zone_failover = d.zone_failover;
      if (d.checkpoint_interval_s > 0) running.tau_s = d.checkpoint_interval_s;
      running.notice_s = d.notice_s;
      // A window that measures (or follows a switch) is the job's own: it starts when the job
      // runs, and the job waiting for spot capacity is asked again after a decision interval.
      RunWindow(running, window, &r, soon ? s_.decision_interval_s : 0);
      if (mixed_) r.mixed_hours += t_h_ - h0;
      if (measuring && !first) {
        r.exploration_cost += cost_ - c0;
        explore_h_ += window / 3600.0;
        ++r.measurements;
      }
      explore_cost_ = r.exploration_cost;
      first = false;
      if (progress_ >= s_.target_progress) break;
      // A full decision at the decision interval, after a measurement, after a move to other
      // hardware (the live job decides again on the new configuration's first record) and on a
      // revocation; in between, a batch-only one (Decision::retune_s).
      since_decision_s += (t_h_ - h0) * 3600;
      const bool batch_only = d.retune_s > 0 && !waiting_ && !measuring && !mixed_ &&
                              !(soon && hardware_switched) &&
                              since_decision_s < s_.decision_interval_s - 1e-6;
      const double noise = MeasuredNoise(cur_).noise_scale();
      Decision keep = d;
      keep.config = cur_;
      keep.measure = false;
      keep.mixed.reset();
      Decision next = keep;
      if (!batch_only ||
          !(std::abs(std::log(noise / decided_noise)) < std::log(kRetuneNoiseFactor))) {
        next = policy(*this, cur_, false);
        decided_noise = noise;
        if (batch_only &&
            !(next.in_process && *next.in_process == next.config && !next.mixed && !next.measure)) {
          const std::optional<Config> take = next.in_process;
          next = keep;
          if (take) next.config = *take;  // decided on cur_: its hardware
        }
      }
      if (!batch_only) since_decision_s = 0;
      hardware_switched = next.mixed || mixed_ || next.measure || !next.config.SameHardware(cur_);
      if (next.mixed && !CanRun(*next.mixed)) {  // not composable: not offered
        next.mixed.reset();
        next.config = next.single;
        next.why = "(the mixed cluster proposed cannot be composed from the traces) " + next.why;
      }
      switched =
          next.mixed || mixed_ ? !SameMixed(next.mixed, mixed_, true) : !(next.config == cur_);
      if (switched) {
        const bool same_hardware = (!next.mixed && !mixed_ && next.config.SameHardware(cur_)) ||
                                   (next.mixed && SameMixed(next.mixed, mixed_, false));
        const double sw = same_hardware ? s_.cost.batch_switch_s : s_.cost.switch_s;
        if (!same_hardware) zone_.clear();  // a launch: its spot nodes in the zones it gets
        const double c1 = cost_;
        Record(next, &r);  // when it was decided (the switch takes sw seconds from here)
        Advance(sw / 3600.0, Describe(next.config, next.mixed).price);
        if (next.measure) {
          r.exploration_cost += cost_ - c1;
          explore_h_ += sw / 3600.0;
        }
        explore_cost_ = r.exploration_cost;
        ++r.switches;
        last_ckpt_progress_ = progress_;  // a switch checkpoints
        last_ckpt_metric_ = metric_;
        since_ckpt_s_ = 0;
        cur_ = next.config;
        mixed_ = next.mixed;
        if (mixed_) ++r.mixed_switches;
        running_ = waiting_ = false;
      }
      measuring = next.measure;
      d = next;
    }
    r.cost = cost_;
    r.makespan_h = t_h_;
    for (const auto& [key, o] : obs_) r.configs_run.push_back(key);
    r.finished = progress_ >= s_.target_progress;
    r.Score(s_.objective);
    return r;
  }

  // The gradient statistics the job running `cur` measures now, at the batch it runs.
  core::NoiseState MeasuredNoise(const Config& cur) const {
    return s_.NoiseAt(progress_,
                      mixed_ ? MixedBatch(*mixed_) : static_cast<double>(cur.global_batch()));
  }
  // What the job running `cur` has seen: its own noisy measurements, the gradient statistics a
  // job at its batch measures, what it has spent, the spot capacity it was told of.
  JobView View(const Config& cur) const {
    JobView job;
    for (auto& [key, o] : obs_) {
      core::Measurement m;
      m.key = key;
      m.step_time = o.sum / o.n;
      m.sync_time = std::min(o.sync, 0.95 * m.step_time);
      m.rows = o.n;
      job.measured.push_back(m);
    }
    job.noise = MeasuredNoise(cur);
    job.current = cur;
    job.mixed = mixed_;
    job.progress = progress_;
    job.hours = t_h_;
    job.cost_usd = cost_;
    job.exploration_hours = explore_h_;
    job.exploration_usd = explore_cost_;
    for (const auto& [type, trace] : s_.spot) job.spot_nodes_available[type] = SpotAvailable(type);
    job.noise_history = noise_history_;
    job.spot_exposure = exposure_;
    job.gradient_bytes = s_.gradient_bytes;
    return job;
  }
  // Runs a policy that sees only the job's view. It is launched in `launch` (the start
  // configuration, bought as the policy chooses) and starts by measuring it for as long as `first`
  // says (its own cadence).
  PolicyResult RunBlind(const std::string& name, const Config& launch, const Decision& first,
                        const std::function<Decision(const JobView&)>& policy) {
    return Run(name, [&](Simulator& sim, const Config& cur, bool is_first) -> Decision {
      if (is_first || sim.observations().empty()) {  // nothing measured yet: it still measures
        Decision d = first;
        d.config = is_first ? launch : cur;
        d.measure = true;
        return d;
      }
      return policy(sim.View(cur));
    });
  }

  double progress() const { return progress_; }
  // Spent so far (USD, hours) and the part spent measuring.
  double cost() const { return cost_; }
  double hours() const { return t_h_; }
  double exploration_cost() const { return explore_cost_; }
  double exploration_hours() const { return explore_h_; }
  std::map<core::ConfigKey, Observation>& observations() { return obs_; }

  const InstanceType& Type(const Config& c) const {
    return s_.catalog.types[s_.catalog.Find(c.type)];
  }

 private:
  // "HOURS h: CONFIG" at each change ("(measuring)" when the window measures it).
  void Record(const Decision& d, PolicyResult* r) const {
    std::ostringstream line;
    line << std::fixed << std::setprecision(2) << t_h_ << " h: ";
    if (d.mixed) {
      line << "mixed " << d.mixed->config.ToString() << " (local batches";
      for (int b : d.mixed->local_bsz) line << " " << b;
      line << ")";
    } else {
      line << d.config.ToString() << (d.measure ? " (measuring)" : "");
    }
    line << (d.why.empty() ? "" : ": " + d.why);
    r->schedule.push_back(line.str());
  }

  double MeasureWindow(const Decision& d) const {
    if (d.measure_steps <= 0) return s_.measure_s;
    const double step = Describe(cur_, mixed_).step_time;
    const double by_steps = d.measure_steps * step;
    if (!(d.measure_seconds > 0)) return by_steps;
    return std::min(by_steps, std::max(d.measure_seconds, d.min_steps * step));
  }

  void Advance(double hours, double price) {
    t_h_ += hours;
    cost_ += hours * price;
  }

  // What running `c` (or the mixed cluster `mixed`) means for one window. Throws InputError
  // when the truth has no such configuration.
  Running Describe(const Config& c, const std::optional<MixedEvaluation>& mixed) const {
    Running run;
    if (mixed) {
      const auto step = mixed_truth_.Step(mixed->config, mixed->local_bsz);
      if (!step) throw InputError("replay: a mixed cluster without a composable truth");
      run.step_time = step->step_time;
      run.sync_time = step->sync_time;
      run.batch = MixedBatch(*mixed);
      const auto key = OneHardwareKey(mixed->config, mixed->local_bsz);
      run.observed = key.has_value();  // the profile is per single-type configuration
      if (key) run.key = *key;
      for (const MixedPart& part : mixed->config.parts)
        AddPart(part.type, part.nodes, part.purchase, &run);
    } else {
      const core::Measurement* m = Truth(c);
      if (!m) throw InputError("replay: policy chose an untraced configuration " + c.ToString());
      run.step_time = m->step_time;
      run.sync_time = m->sync_time;
      run.batch = static_cast<double>(c.global_batch());
      run.key = c.Key();
      AddPart(c.type, c.nodes, c.purchase, &run);
    }
    // Checkpoints at the Young/Daly interval of the catalog's rate (what the job can know).
    run.tau_s = YoungDalyInterval(run.checkpoint_s, run.catalog_rate);
    return run;
  }
  // Adds one part's price, revocation exposure and spot capacity to `run`.
  void AddPart(const std::string& type, int nodes, Purchase purchase, Running* run) const {
    const InstanceType& t = s_.catalog.types[s_.catalog.Find(type)];
    run->price += HourlyPrice(t, nodes, purchase);
    const double rate = ClusterRevocationRate(t, nodes, purchase);
    run->catalog_rate += rate;
    run->checkpoint_s =
        std::max(run->checkpoint_s, purchase == Purchase::kAnchor ? s_.cost.anchor_checkpoint_s
                                                                  : s_.cost.checkpoint_s);
    // Real spot capacity: the spot nodes this part holds, and what it pays while it waits for
    // them (its on-demand anchor; an on-demand part of a mixed cluster keeps paying too).
    auto it = s_.spot.find(type);
    const bool traced = purchase != Purchase::kOnDemand && it != s_.spot.end();
    if (!traced) run->hazard_rate += rate;  // a type without a trace: the catalog's rate
    if (const int spot_nodes = SpotNodes(nodes, purchase); spot_nodes > 0)
      run->spot.push_back({type, spot_nodes, traced ? &it->second : nullptr});
    if (purchase == Purchase::kOnDemand) run->waiting_price += HourlyPrice(t, nodes, purchase);
    if (traced && purchase == Purchase::kAnchor)
      run->waiting_price += HourlyPrice(t, 1, Purchase::kOnDemand);
  }
  // The zone a traced part holds its nodes in: the one with the most when it first ran after its
  // launch, until it fails over.
  size_t ZoneOf(const Running::SpotPart& part) {
    auto [it, fresh] = zone_.try_emplace(part.type, 0);
    if (fresh)
      it->second = part.market->BestZone(t_h_ * 3600, part.nodes, s_.spot_reading, spot_offset_s_);
    return it->second;
  }
  // The first part whose zone does not have its nodes now (null: every one has them).
  const Running::SpotPart* ShortPart(const Running& run) {
    for (const auto& part : run.spot)
      if (part.market &&
          part.market->zone(ZoneOf(part))
                  .Available(t_h_ * 3600, part.nodes, s_.spot_reading, spot_offset_s_) < part.nodes)
        return &part;
    return nullptr;
  }
  // Moves `part` to the first other zone of its type that has all its nodes now (a relaunch
  // there); false where none has.
  bool FailOver(const Running::SpotPart& part) {
    const double t = t_h_ * 3600;
    const size_t own = ZoneOf(part);
    for (size_t z = 0; z < part.market->zones(); ++z)
      if (z != own && part.market->zone(z).Available(t, part.nodes, s_.spot_reading,
                                                     spot_offset_s_) >= part.nodes) {
        zone_[part.type] = z;
        return true;
      }
    return false;
  }

  // The gradient statistics the hooks measured at the batch the job runs: one observation per
  // simulated minute of training (the live runtime records at least every measure_seconds, 30 s
  // by default), runtime::kMaxNoiseHistory of them kept, thinned as the live runtime thins them.
  // Only between the trace's first and last rows: before the first and after the last the trace
  // holds a value it did not measure there, and records of it would be a flat growth with no
  // scatter, which a growth fit would take for certainty.
  void RecordNoise(double batch) {
    const auto& rows = s_.NoiseRows(batch);
    if (rows.empty() || progress_ < rows.front().progress || progress_ > rows.back().progress)
      return;
    const core::NoiseState ns = s_.NoiseAt(progress_, batch);
    noise_history_.push_back({batch, progress_, 0.0, ns.grad_sqr, ns.grad_var});
    estimator::ThinNoiseHistory(&noise_history_, runtime::kMaxNoiseHistory);
  }

  // A revocation: the job goes back to its last checkpoint, which it writes on the notice when the
  // warning covers one (Decision::notice_s).
  void RollBack(const Running& run) {
    if (SavesOnNotice(run.notice_s, run.checkpoint_s)) {
      Advance(run.checkpoint_s / 3600.0, run.price);
      last_ckpt_progress_ = progress_;
      last_ckpt_metric_ = metric_;
    }
    progress_ = last_ckpt_progress_;
    metric_ = last_ckpt_metric_;
    since_ckpt_s_ = 0;
  }

  // Runs `window_s` seconds; with `wait_cap_s` > 0, seconds of training (waiting for spot capacity
  // does not count), unless it waits `wait_cap_s` seconds in all.
  void RunWindow(const Running& run, double window_s, PolicyResult* r, double wait_cap_s = 0) {
    const double price = run.price, rate = run.hazard_rate, ckpt = run.checkpoint_s;
    const double tau_s = run.tau_s, batch = run.batch, waiting_price = run.waiting_price;
    // Time since the last checkpoint carries over from window to window (checkpoints follow the
    // Young/Daly interval of the running configuration, not the decision windows).
    double left = window_s;
    double& since_ckpt = since_ckpt_s_;
    bool trained = false;
    double waited_s = 0;
    const bool traced = std::any_of(run.spot.begin(), run.spot.end(),
                                    [](const Running::SpotPart& p) { return p.market; });
    const auto untraced = std::find_if(run.spot.begin(), run.spot.end(),
                                       [](const Running::SpotPart& p) { return !p.market; });
    while (left > 1e-9 && progress_ < s_.target_progress) {
      const double chunk = std::min(kNoiseRecordS, left);
      if (traced) {
        if (const Running::SpotPart* lost = ShortPart(run)) {
          if (running_ && !waiting_) {  // the capacity it holds is gone: a revocation
            ++r->revocations;
            ++exposure_[lost->type].revocations;
            RollBack(run);
            if (run.redecide_on_revocation) {
              waiting_ = true;
              break;
            }
          }
          waiting_ = true;
          // Another zone that has the nodes: the job relaunches there (the restart below), or
          // launches there when it has not run yet.
          if (run.zone_failover && FailOver(*lost)) {
            if (running_) ++r->zone_failovers;
            continue;
          }
          const double w = wait_cap_s > 0 ? std::min(kNoiseRecordS, wait_cap_s - waited_s) : chunk;
          Advance(w / 3600.0, waiting_price);
          r->waited_h += w / 3600.0;
          if (wait_cap_s > 0) {
            waited_s += w;
            if (waited_s >= wait_cap_s - 1e-9) break;
          } else {
            left -= w;
          }
          // A job that decides again on a revocation's notice also decides again after each
          // record it waits for nodes the market does not have (a refused request tells it as
          // much): capacity that was there when it decided may be gone when it asks.
          if (run.redecide_on_revocation) break;
          continue;
        }
        if (waiting_ && running_) Advance(s_.cost.restart_s / 3600.0, price);  // back: restart
        waiting_ = false;
      }
      running_ = true;
      double dp, metric = metric_;
      if (s_.measured) {  // measured truth: the metric the runs reach in these steps
        metric = s_.measured->MetricAfter(batch, metric_, chunk / run.step_time);
        dp = s_.ProgressAt(metric) - progress_;
      } else {
        dp = chunk / run.step_time * estimator::Gain(NoiseAt(progress_), batch);
      }
      if (progress_ + dp >= s_.target_progress) {  // finishes inside this chunk
        double frac = dp > 0 ? (s_.target_progress - progress_) / dp : 1.0;
        if (s_.measured)  // exactly the steps the measured run at this batch needs
          frac = std::min(
              1.0, s_.measured->StepsBetween(batch, metric_, std::max(metric_, s_.target_metric)) *
                       run.step_time / chunk);
        Advance(frac * chunk / 3600.0, price);
        trained = true;
        progress_ = s_.target_progress;
        metric_ = std::max(metric_, s_.target_metric);
        break;
      }
      progress_ += dp;
      metric_ = metric;
      Advance(chunk / 3600.0, price);
      trained = true;
      RecordNoise(batch);
      for (const auto& part : run.spot)
        exposure_[part.type].node_hours += part.nodes * chunk / 3600.0;
      left -= chunk;
      since_ckpt += chunk;
      if (since_ckpt >= tau_s) {
        Advance(ckpt / 3600.0, price);
        last_ckpt_progress_ = progress_;
        last_ckpt_metric_ = metric_;
        since_ckpt = 0;
      }
      // Revocations by inverse-hazard sampling: a revocation happens when the cumulative hazard
      // (rate × time) crosses the next Exp(1) threshold. The thresholds come from a stream that
      // depends on the seed only, so every policy faces the same revocation luck (common random
      // numbers); a riskier configuration crosses the thresholds sooner.
      hazard_ += rate * chunk / 3600.0;
      if (hazard_ >= next_revocation_) {
        ++r->revocations;
        if (untraced != run.spot.end()) ++exposure_[untraced->type].revocations;
        RollBack(run);
        Advance(s_.cost.restart_s / 3600.0, price);
        hazard_ = 0;
        next_revocation_ = std::exponential_distribution<double>(1.0)(revocation_rng_);
      }
    }
    // What the hooks measured during the window: the mean step time with log-normal noise; nothing
    // when the job did not train in it (it waited for spot capacity throughout).
    std::normal_distribution<double> z(0.0, 1.0);
    const double noise = std::exp(s_.step_noise_sigma * z(rng_));
    if (run.observed && trained) {
      Observation& o = obs_[run.key];
      o.sum += run.step_time * noise;
      o.sync = run.sync_time * noise;
      ++o.n;
    }
  }

  const Scenario& s_;
  std::mt19937_64 rng_;             // measurement noise (per policy)
  std::mt19937_64 revocation_rng_;  // revocation thresholds (the same for every policy)
  double hazard_ = 0, next_revocation_ = 0;
  std::map<core::ConfigKey, const core::Measurement*> truth_;
  std::map<core::ConfigKey, Observation> obs_;
  std::vector<core::NoiseObservation> noise_history_;
  Config cur_;
  std::optional<MixedEvaluation> mixed_;  // the mixed cluster it runs instead of cur_, if any
  double progress_ = 0, last_ckpt_progress_ = 0, t_h_ = 0, cost_ = 0;
  double explore_cost_ = 0, explore_h_ = 0;
  double since_ckpt_s_ = 0;                   // training seconds since the last checkpoint
  double spot_offset_s_ = 0;                  // where this seed starts in the spot traces
  double metric_ = 0, last_ckpt_metric_ = 0;  // measured truth: best validation metric reached
  bool running_ = false;  // the current configuration has run (a later loss is a revocation)
  bool waiting_ = false;  // waiting for spot capacity
  std::map<std::string, size_t> zone_;  // per type: the zone its spot nodes are in (ZoneOf)
  MixedTruth mixed_truth_;
  std::map<std::string, core::SpotExposure> exposure_;  // what the job has seen of spot, per type
};

}  // namespace cloudtune::replay::detail
