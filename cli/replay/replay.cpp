#include "cli/replay/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "cli/replay/mixed_truth.h"
#include "cli/replay/oracle.h"
#include "cli/replay/simulator.h"
#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "estimator/efficiency.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune::replay {

namespace {

using namespace detail;  // the simulator (simulator.h)

// A predictor that knows every trace (for the oracle and trace-informed baselines).
Predictor TruePredictor(const Simulator& sim, const Scenario& s, double progress) {
  Predictor p;
  p.step_time = [&sim](const InstanceType&, const Config& c) {
    const core::Measurement* m = sim.Truth(c);
    return Estimate{m ? m->step_time : 0.0, 0.0};
  };
  if (s.measured) {
    const double from = sim.metric(), to = s.target_metric;
    const MeasuredSteps* truth = s.measured.get();
    p.steps = [truth, from, to](double b) {
      return Estimate{truth->StepsBetween(b, from, std::max(from, to)), 0.0};
    };
    return p;
  }
  auto eff = std::make_shared<estimator::EfficiencyModel>(
      estimator::EfficiencyModel::FromNoise(sim.NoiseAt(progress)));
  const double to = s.target_progress;
  p.steps = [eff, progress, to](double b) {
    auto sp = eff->StepsToProgress(b, progress, to);
    return Estimate{sp.steps, 0.0};
  };
  return p;
}

RecommendOptions BaseOptions(const Scenario& s, double progress) {
  RecommendOptions o;
  o.objective = s.objective;
  o.cost = s.cost;
  o.target_progress = s.target_progress;
  o.current_progress = progress;
  o.measure_s = s.measure_s;
  return o;
}

// Decide() with full knowledge of the traces, restricted to `candidates`.
Decision Informed(Simulator& sim, const Scenario& s, const Config& cur,
                  const std::vector<Config>& candidates, ObjectiveOptions objective,
                  const SpaceOptions& space) {
  SearchProblem p;
  p.catalog = &s.catalog;
  p.predictor = TruePredictor(sim, s, sim.progress());
  p.objective = objective;
  p.cost = s.cost;
  p.space = space;
  p.remaining_progress = s.target_progress - sim.progress();
  p.current = &cur;
  p.candidates = candidates;
  for (const auto& [type, trace] : s.spot)
    p.space.spot_nodes_available[type] = sim.SpotAvailable(type);
  RecommendOptions o = BaseOptions(s, sim.progress());
  o.objective = objective;
  Recommendation r = Decide(p, o, [](const Config&) { return true; });
  return {r.proposed.config, false};
}

// The traced configuration of `type` closest to `want` (most replicas, then nearest local batch).
Config Pick(const Scenario& s, const std::string& type, int want_bsz,
            const std::function<double(const Config&)>& score) {
  const Config* best = nullptr;
  double best_score = 0;
  for (const Config& c : s.candidates) {
    if (c.type != type) continue;
    const double sc = score(c) - 1e-6 * std::abs(std::log(double(c.local_bsz) / want_bsz));
    if (!best || sc > best_score) {
      best = &c;
      best_score = sc;
    }
  }
  return *best;
}

}  // namespace

namespace {

using Runner = std::function<void(const std::string&,
                                  const std::function<Decision(Simulator&, const Config&, bool)>&)>;

// When the live runtime has its first recommendation for a configuration: at its first
// measurement record (the warm-up and measure_every steps, or measure_seconds once the record has
// kMinRecordSteps timed steps), since the tuner refits at once on the job's first record and on
// the first record of a new configuration.
Decision CloudtuneCadence(const runtime::Options& o) {
  Decision d;
  d.measure = true;
  d.measure_steps = o.warmup_steps + o.measure_every;
  d.measure_seconds = o.measure_seconds;
  d.min_steps = o.warmup_steps + runtime::kMinRecordSteps;
  // Waiting for spot capacity costs a deadline time: the job asks its tuner again on the notice,
  // and at each record it spends waiting for spot nodes it was refused.
  d.redecide_on_revocation = o.deadline_hours > 0;
  // The live tuner decides again every refit_seconds; the replay's job measures its noise once a
  // simulated minute, and a decision between two records would see nothing new.
  d.retune_s = std::max(o.refit_seconds, kNoiseRecordS);
  return d;
}

// The cloudtune policy: the job's runtime deciding on what the job has seen, nothing else. A
// configuration it measures is measured for as long as the live runtime needs to judge it.
Decision CloudtunePolicy(const runtime::Runtime& tuner, const Decision& cadence,
                         const JobView& job) {
  const search::Recommendation r = CloudtuneDecide(tuner, job);
  Decision d = cadence;
  d.config = r.proposed.config;
  d.measure = r.action == Recommendation::Action::kMeasure;
  d.why = r.reason;
  d.checkpoint_interval_s = r.proposed.checkpoint_interval_s;  // from the rates it has learned
  d.in_process = search::InProcessBatch(r, job.current);
  if (!d.measure && r.mixed && r.mixed->proposed && r.mixed->best) {
    // A mixed cluster: the job keeps reporting its single-type configuration; a running cluster
    // with the same hardware is kept (its balanced batches are not re-tuned at every decision).
    d.single = d.config;
    d.config = job.current;
    d.mixed = job.mixed && SameMixed(job.mixed, r.mixed->best, false) ? *job.mixed : *r.mixed->best;
    d.why = "mixed: " + r.mixed->reason;
    // Its on-demand nodes would idle, paid, while its spot part waits: decide again at once.
    d.redecide_on_revocation = true;
    d.checkpoint_interval_s = 0;  // the catalog's, over all its parts
  }
  return d;
}

// Baselines that keep the start configuration: on spot, managed spot, Uniform Progress.
void RunStartBaselines(const Scenario& s, const Runner& run) {
  // The start configuration on spot, waiting out shortages in its zone and restarting after
  // revocations.
  Config c = s.start;
  const InstanceType& t = s.catalog.types[s.catalog.Find(c.type)];
  c.purchase = t.has_spot() ? Purchase::kSpot : Purchase::kOnDemand;
  run("fixed-spot", [c](Simulator&, const Config&, bool) -> Decision {
    Decision d{c, false};
    d.zone_failover = false;
    return d;
  });
  // Managed spot: another zone when its own has no nodes, on demand while no zone has them (seen
  // at a decision).
  run("managed-spot", [c, &s](Simulator& sim, const Config&, bool first) -> Decision {
    if (first || sim.SpotAvailable(c.type) >= c.nodes) return {c, false};
    return {s.start, false};
  });
  if (s.objective.deadline_h > 0) {
    // Uniform Progress: its speed is what it has measured (progress per hour of its last window
    // that made progress; the start configuration runs at one speed on spot and on demand).
    struct State {
      double progress = 0, hours = 0, rate = 0;
    };
    auto st = std::make_shared<State>();
    const double deadline = s.objective.deadline_h, target = s.target_progress;
    const double restart_h = (s.cost.switch_s + s.cost.restart_s) / 3600;
    const double window_h = s.decision_interval_s / 3600;
    run("uniform-progress",
        [c, &s, st, deadline, target, restart_h, window_h](Simulator& sim, const Config&,
                                                           bool first) -> Decision {
          if (first) return {s.start, false};  // the first window measures its speed on demand
          if (sim.progress() > st->progress && sim.hours() > st->hours)
            st->rate = (sim.progress() - st->progress) / (sim.hours() - st->hours);
          st->progress = sim.progress();
          st->hours = sim.hours();
          const double left_h = deadline - sim.hours();
          const double work_h = st->rate > 0 ? (target - sim.progress()) / st->rate : left_h;
          // Safety net: switch to on demand for good when one more window's gamble plus a restart
          // would leave too little time for the work on demand.
          if (left_h <= work_h + window_h + restart_h) return {s.start, false};
          if (sim.progress() >= target * sim.hours() / deadline)
            return {c, false};  // ahead (or on the line): spot, waiting when there is none
          return {s.start, false};
        });
  }
}

// Baselines that pick one configuration by a rule (price, TFLOPS, FLOPP, goodput).
void RunRuleBaselines(const Scenario& s, uint64_t seed, const Runner& run) {
  // Types that have traces.
  std::vector<std::string> types;
  for (const Config& c : s.candidates)
    if (std::find(types.begin(), types.end(), c.type) == types.end()) types.push_back(c.type);
  auto type_of = [&](const std::string& n) -> const InstanceType& {
    return s.catalog.types[s.catalog.Find(n)];
  };
  auto most_gpus = [](const Config& c) { return double(c.replicas()); };
  {  // cheapest spot per GPU, most nodes
    std::string best;
    double bp = 0;
    for (auto& t : types) {
      const auto& it = type_of(t);
      const double p = HourlyPrice(it, 1, Purchase::kSpot) / it.gpus;
      if (best.empty() || p < bp) best = t, bp = p;
    }
    Config c = Pick(s, best, s.start.local_bsz,
                    [](const Config& c) { return c.nodes * 1000.0 + c.gpus_per_node; });
    c.purchase = type_of(best).has_spot() ? Purchase::kSpot : Purchase::kOnDemand;
    run("cheapest-spot", [c, &s](Simulator&, const Config&, bool first) -> Decision {
      return first ? Decision{s.start, true} : Decision{c, false};
    });
  }
  {  // fastest first: highest per-GPU TFLOPS, most GPUs, on demand
    std::string best;
    double bf = -1;
    for (auto& t : types) {
      const auto& it = type_of(t);
      const double f = InstanceTflops(s.catalog, it) / it.gpus;
      if (f > bf) best = t, bf = f;
    }
    Config c = Pick(s, best, s.start.local_bsz, most_gpus);
    run("fastest-first", [c, &s](Simulator&, const Config&, bool first) -> Decision {
      return first ? Decision{s.start, true} : Decision{c, false};
    });
  }
  {  // DeepVM: highest FLOPP type (spot price), its profiled config with the best samples/s per
     // USD/h, anchor + spot workers when multi-node.
    std::string best;
    double bf = -1;
    for (auto& t : types) {
      const double f = Flopp(s.catalog, type_of(t), Purchase::kSpot);
      if (f > bf) best = t, bf = f;
    }
    Simulator probe(s, seed, "deepvm-probe");
    const InstanceType& it = type_of(best);
    Config c = Pick(s, best, s.start.local_bsz, [&](const Config& c) {
      const auto* m = probe.Truth(c);
      const Purchase pu = c.nodes > 1 ? Purchase::kAnchor : Purchase::kSpot;
      return m ? c.global_batch() / m->step_time / HourlyPrice(it, c.nodes, pu) : 0.0;
    });
    c.purchase =
        !it.has_spot() ? Purchase::kOnDemand : (c.nodes > 1 ? Purchase::kAnchor : Purchase::kSpot);
    run("deepvm-flopp", [c, &s](Simulator&, const Config&, bool first) -> Decision {
      return first ? Decision{s.start, true} : Decision{c, false};
    });
  }
  {  // Pollux: maximise goodput (fastest to target) on the start type, on demand, price-blind.
    std::vector<Config> same;
    for (const Config& c : s.candidates)
      if (c.type == s.start.type) same.push_back(c);
    SpaceOptions od;
    od.allow_spot = od.allow_anchor = false;
    ObjectiveOptions time;
    time.goal = Goal::kTime;
    run("pollux-goodput", [&, same, od, time](Simulator& sim, const Config& cur, bool first) {
      if (first) return Decision{s.start, true};
      return Informed(sim, s, cur, same, time, od);
    });
  }
}

// The hindsight optimum and the best fixed configuration; inserted after cloudtune.
void AddHindsight(const Scenario& s, uint64_t seed, const Oracle* oracle,
                  std::vector<PolicyResult>* results) {
  std::vector<PolicyResult>& out = *results;
  double horizon_h = 0;
  for (const PolicyResult& r : out)
    if (r.finished) horizon_h = std::max(horizon_h, r.makespan_h);
  OracleOptions oo = oracle ? oracle->options() : OracleOptions{};
  oo.horizon_h = OracleHorizon(s, horizon_h);
  std::unique_ptr<Oracle> own;
  if (!oracle) oracle = (own = std::make_unique<Oracle>(s, oo)).get();
  auto as_policy = [&s](const OracleResult& x) {
    PolicyResult p;
    p.policy = "oracle";
    p.finished = x.finished;
    p.cost = x.cost;
    p.cost_lower = x.cost_lower;
    p.makespan_lower_h = x.makespan_lower_h;
    p.switches = x.switches;
    p.schedule = x.schedule;
    p.makespan_h = x.makespan_h;
    p.Score(s.objective);
    return p;
  };
  // No schedule it can follow meets the deadline and budget, yet its lower bound (progress
  // rounded up) finds one: the levels are too coarse to tell. Refine. (While finer levels remain,
  // a time-goal schedule later than twice its lower bound is not looked for at these levels.)
  const int most = oo.levels * kMaxOracleRefinement;
  auto finer = [&] { return oracle->options().levels * 2 <= most; };
  // The best fixed configuration comes from the levels given: its search, a recursion over the
  // whole horizon per configuration, would cost more time at finer levels than the oracle's own.
  const OracleResult given = oracle->Solve(seed, oo.horizon_h, finer() ? 2.0 : 0.0);
  PolicyResult r = as_policy(given);
  for (OracleResult o = given;
       !(r.finished && r.deadline_met && r.budget_met) && std::isfinite(o.cost_lower) && finer();) {
    oracle = &oracle->Refined();
    o = oracle->Solve(seed, oo.horizon_h, finer() ? 2.0 : 0.0, false);
    r = as_policy(o);
  }
  r.levels = oracle->options().levels;
  PolicyResult f;
  f.policy = "hindsight-fixed";
  f.finished = given.fixed_cost > 0;
  f.cost = given.fixed_cost;
  f.makespan_h = given.fixed_makespan_h;
  // Its one configuration is its choice at time 0, as a policy's first is (no switch counted).
  f.switches = 0;
  if (f.finished) f.schedule = {"0.00 h: " + given.fixed_config};
  f.Score(s.objective);
  out.insert(out.begin() + 1, r);
  out.insert(out.begin() + 2, f);
}

}  // namespace

std::vector<PolicyResult> RunReplay(const Scenario& s, uint64_t seed, const Oracle* oracle) {
  std::vector<PolicyResult> out;
  const Runner run = [&](const std::string& name,
                         const std::function<Decision(Simulator&, const Config&, bool)>& policy) {
    Simulator sim(s, seed, name);
    out.push_back(sim.Run(name, policy));
  };
  // cloudtune: the runtime a live job runs, fed only the job's view (JobView); it is launched in
  // the start configuration as `cloudtune launch-spec --start` buys it, and starts by measuring it.
  auto run_cloudtune = [&](const std::string& name, int mixed_types) {
    runtime::RuntimeSetup setup = CloudtuneSetup(s);
    setup.options.mixed_types = mixed_types;
    auto tuner = std::make_shared<runtime::Runtime>(setup);
    Simulator sim(s, seed, "cloudtune");  // the same measurement noise: what differs is mixing
    Decision cadence = CloudtuneCadence(setup.options);
    cadence.notice_s = CloudtuneNoticeS(s);
    out.push_back(sim.RunBlind(
        name, CloudtuneLaunch(s, sim.SpotAvailable(s.start.type)), cadence,
        [tuner, cadence](const JobView& job) { return CloudtunePolicy(*tuner, cadence, job); }));
  };
  run_cloudtune("cloudtune", runtime::Options{}.mixed_types);
  std::set<std::string> types;
  for (const Config& c : s.candidates) types.insert(c.type);
  if (!s.spot.empty() && types.size() >= 2) {
    if (out.front().mixed_switches > 0) {
      run_cloudtune("cloudtune-one-type", 0);
    } else {  // it ran no mixed cluster: the same runtime without them decides the same way
      out.push_back(out.front());
      out.back().policy = "cloudtune-one-type";
    }
  }
  run("fixed-on-demand", [&](Simulator&, const Config&, bool) -> Decision {
    return {s.start, false};
  });
  RunStartBaselines(s, run);
  RunRuleBaselines(s, seed, run);
  // A perfect model deciding online (greedy in time, not in hindsight).
  const SpaceOptions all;
  run("informed-greedy", [&](Simulator& sim, const Config& cur, bool first) -> Decision {
    if (first) return {s.start, true};
    return Informed(sim, s, cur, s.candidates, s.objective, all);
  });
  AddHindsight(s, seed, oracle, &out);
  return out;
}

}  // namespace cloudtune::replay
