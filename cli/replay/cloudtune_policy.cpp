// The cloudtune policy of the replay: the runtime a live job constructs (CloudtuneSetup), fed only
// what the job has seen (CloudtuneDecide).
#include <algorithm>

#include "cli/replay/replay.h"
#include "plugin/runtime/preemption.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune::replay {

double CloudtuneNoticeS(const Scenario& s) {
  return runtime::UsableNoticeSeconds(s.warning_s, runtime::Options{}.preemption_poll_seconds);
}

namespace {
// The job's costs as its runtime prices them: the scenario's, and it watches for notices.
search::CostOptions CloudtuneCost(const Scenario& s) {
  search::CostOptions c = s.cost;
  c.notice_s = CloudtuneNoticeS(s);
  return c;
}
}  // namespace

// The runtime options of the scenario's job: its objective and target; the search is restricted to
// the traced configurations (the truth exists only for those), priced with the scenario's catalog.
runtime::RuntimeSetup CloudtuneSetup(const Scenario& s) {
  runtime::RuntimeSetup rs;
  rs.options.objective = core::GoalName(s.objective.goal);
  rs.options.deadline_hours = s.objective.deadline_h;
  rs.options.budget_usd = s.objective.budget_usd;
  rs.options.target_progress = s.target_progress;
  rs.customize = [&s](runtime::FitAndSearchOptions* fo) {
    fo->catalog = &s.catalog;
    fo->instance_type.clear();  // the snapshot's current configuration says
    fo->recommend.cost = CloudtuneCost(s);
    fo->recommend.measure_s = s.measure_s;
    fo->recommend.decide_again_s = s.decision_interval_s;
    fo->candidates = s.candidates;
  };
  return rs;
}

Config CloudtuneLaunch(const Scenario& s, int spot_nodes) {
  Config c = s.start;
  c.purchase = search::AdviseLaunch(s.catalog.types[s.catalog.Find(c.type)], c.nodes, s.objective,
                                    CloudtuneCost(s))
                   .purchase;
  if (c.purchase != Purchase::kSpot || spot_nodes >= c.nodes) return c;
  Config fewer = c;
  fewer.nodes = std::max(1, spot_nodes);
  const bool traced = std::any_of(s.candidates.begin(), s.candidates.end(),
                                  [&fewer](const Config& t) { return t.Key() == fewer.Key(); });
  return traced && FewerOfTheStartsNodes(s, fewer) ? fewer : c;
}

bool FewerOfTheStartsNodes(const Scenario& s, const Config& c) {
  Config start = s.start;
  start.nodes = c.nodes;
  start.purchase = c.purchase;
  return c == start && c.nodes < s.start.nodes && s.spot.count(c.type) > 0;
}

search::Recommendation CloudtuneDecide(const runtime::Runtime& rt, const JobView& job) {
  core::Snapshot snap;
  snap.profile = job.measured;
  snap.noise = job.noise;
  snap.noise_valid = true;
  snap.current = job.current.Key();
  snap.gpus_per_node = job.current.gpus_per_node;
  snap.purchase = job.current.purchase;
  snap.mixed_cluster = job.mixed.has_value();
  if (job.mixed) snap.mixed_parts = search::PartsOf(*job.mixed);
  snap.progress = job.progress;
  snap.elapsed_seconds = job.hours * 3600;
  snap.cost_usd = job.cost_usd;
  snap.exploration_usd = job.exploration_usd;
  snap.exploration_seconds = job.exploration_hours * 3600;
  snap.spot_nodes_available = job.spot_nodes_available;
  snap.noise_history = job.noise_history;
  snap.spot_exposure = job.spot_exposure;
  snap.gradient_bytes = job.gradient_bytes;
  return rt.Decide(snap, "timer").decision;
}

}  // namespace cloudtune::replay
