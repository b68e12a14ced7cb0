// The replay's simulator (cli/replay/simulator.h): what a job running a schedule through a spot
// capacity trace pays, waits for and records, driven by a fixed policy.
#include "cli/replay/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "plugin/runtime/options.h"
#include "tests/cli/replay_fixtures.h"
#include "tests/shared_data.h"

namespace cloudtune::replay {
namespace {

using namespace fixtures;  // the scenarios these tests vary

// A job that acts on the revocation notice (the cloudtune policy; Decision::notice_s) writes a
// checkpoint before its node goes, so the revocation loses no work: the same spot run through the
// same capacity gap, checkpointing every 2 h, with and without acting on the notice.
TEST(Simulator, ARevocationSavedOnItsNoticeLosesNoWork) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string trace = CapacityTrace("g4dn_capacity_notice.json", "2, 2, 2, 0, 0, 0");
  nlohmann::json j = Base();
  j["spot"] = {{"reading", "count"}, {"offset_h", 0}, {"traces", {{"g4dn.12xlarge", trace}}}};
  const Scenario s = ParseScenario(j, "notice.json", kScenarios);
  Config spot = s.start;
  spot.purchase = Purchase::kSpot;
  auto run = [&](double notice_s) {
    detail::Simulator sim(s, 0, "fixed-spot");
    return sim.Run("fixed-spot", [&](detail::Simulator&, const Config&, bool) {
      detail::Decision d(spot, false);
      d.checkpoint_interval_s = 7200;
      d.notice_s = notice_s;
      return d;
    });
  };
  const PolicyResult lost = run(0), saved = run(115), short_notice = run(20);
  ASSERT_GT(saved.makespan_h, 1.0) << "the job must outlast the gap";
  EXPECT_EQ(lost.revocations, 1);
  EXPECT_EQ(saved.revocations, 1);
  // Revoked at 30 min without a periodic checkpoint yet: without the notice those 30 minutes are
  // trained again; with it, a checkpoint (30 s) is written instead.
  const double ckpt_h = s.cost.checkpoint_s / 3600;
  EXPECT_NEAR(lost.makespan_h - saved.makespan_h, 0.5 - ckpt_h, 1.0 / 60 + 1e-9);
  EXPECT_LT(saved.cost, lost.cost);
  // A notice shorter than a checkpoint saves nothing.
  EXPECT_DOUBLE_EQ(short_notice.makespan_h, lost.makespan_h);
  // The scenario's warning reaches the cloudtune job less its polling interval; bad values named.
  EXPECT_DOUBLE_EQ(s.warning_s, 120);
  EXPECT_DOUBLE_EQ(CloudtuneNoticeS(s), 120 - runtime::Options{}.preemption_poll_seconds);
  EXPECT_DOUBLE_EQ(s.cost.notice_s, 0);  // the baselines do not watch for notices
  j["cost"] = {{"warning_s", -1}};
  EXPECT_EQ(ErrorOf(j), "s.json: cost: warning_s: must be >= 0");
  j["cost"] = {{"warning_s", 0}};
  EXPECT_DOUBLE_EQ(CloudtuneNoticeS(ParseScenario(j, "s.json", kScenarios)), 0);
}

// A job waiting for spot capacity is not running: a window it spends waiting measures nothing, and
// a window meant to measure starts when the job does. Capacity comes after an hour; the policy,
// asked at each decision, sees no step time before then, and its first measurement follows the
// capacity by one measuring window.
TEST(Simulator, AJobWaitingForSpotCapacityMeasuresNothingUntilItRuns) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = WithCapacity("g4dn_capacity_late.json", "0, 0, 0, 0, 0, 0");
  Config spot = s.start;
  spot.purchase = Purchase::kSpot;
  std::vector<std::pair<double, size_t>> asked;  // (hours, step times measured) at each decision
  detail::Simulator sim(s, 0, "waits");
  const PolicyResult r = sim.Run("waits", [&](detail::Simulator& sm, const Config&, bool first) {
    if (!first) asked.emplace_back(sm.hours(), sm.observations().size());
    return detail::Decision(spot, sm.observations().empty());  // measures until it has a record
  });
  ASSERT_TRUE(r.finished);
  EXPECT_NEAR(r.waited_h, 1.0, 1e-9);
  ASSERT_GE(asked.size(), 2u);
  bool measured = false;
  for (const auto& [hours, seen] : asked) {
    if (hours < 1.0 + 1e-9) {
      EXPECT_EQ(seen, 0u) << "a step time measured while waiting, at " << hours << " h";
      EXPECT_NEAR(std::fmod(hours * 3600 + 1e-6, s.decision_interval_s), 0, 1e-3)
          << "asked while waiting between decisions, at " << hours << " h";
    } else if (!measured) {
      measured = true;
      EXPECT_EQ(seen, 1u);
      EXPECT_NEAR(hours, 1.0 + s.measure_s / 3600, 1e-9) << "one measuring window after 1 h";
    }
  }
  EXPECT_TRUE(measured);
}

// A job that decides again on a revocation's notice (under a deadline) is also asked again after
// each record it waits for spot nodes the market does not have: it switched to them when the
// capacity was there, or it is refused them at launch, and waiting a decision interval blind would
// spend its slack. Capacity comes after an hour: asked every record until then.
TEST(Simulator, AJobThatDecidesOnNoticesIsAskedAgainAtEachRecordItWaits) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = WithCapacity("g4dn_capacity_late_notice.json", "0, 0, 0, 0, 0, 0");
  Config spot = s.start;
  spot.purchase = Purchase::kSpot;
  auto waits = [&](bool on_notice) {
    std::vector<double> asked;  // hours of each decision before the capacity comes
    detail::Simulator sim(s, 0, "waits");
    const PolicyResult r = sim.Run("waits", [&](detail::Simulator& sm, const Config&, bool first) {
      if (!first && sm.hours() < 1.0 - 1e-9) asked.push_back(sm.hours());
      detail::Decision d(spot, sm.observations().empty());
      d.redecide_on_revocation = on_notice;
      return d;
    });
    EXPECT_TRUE(r.finished);
    EXPECT_NEAR(r.waited_h, 1.0, 1e-9);
    return asked;
  };
  const std::vector<double> notice = waits(true);
  ASSERT_EQ(notice.size(), 59u);  // at 1, 2, ... 59 minutes
  for (size_t i = 0; i < notice.size(); ++i)
    EXPECT_NEAR(notice[i] * 3600, (i + 1) * detail::kNoiseRecordS, 1e-6);
  // Without: asked only at its decisions (every decision_interval_s).
  EXPECT_EQ(waits(false).size(),
            static_cast<size_t>(std::ceil(3600 / s.decision_interval_s - 1e-9)) - 1);
}

// The job's noise records lie where the trace measured: between its first and last rows. Before
// the first row the trace holds that row's value, and a record of it each minute would be a flat
// growth with no scatter, which the growth fit would take for certainty. Cifar10's trace stretched
// 20-fold in progress, so that its first row (the first epoch's average, placed at the epoch's
// middle) lies ten epochs in: no record until the job has passed it, then one a minute.
TEST(Simulator, NoiseRecordsOnlyWhereTheTraceMeasured) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string src = test::SharedDir() + "/data/traces/pollux-t4/cifar10/validation-128.csv";
  const std::string path = ::testing::TempDir() + "/validation-128-late.csv";
  {
    std::ifstream in(src);
    std::ofstream out(path);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    out << line << "\n";  // progress,iteration,metric,grad_sqr,grad_var
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string progress, iteration, rest;
      std::getline(fields, progress, ',');
      std::getline(fields, iteration, ',');
      std::getline(fields, rest);
      out << 20 * std::stod(progress) << "," << 20 * std::stod(iteration) << "," << rest << "\n";
    }
  }
  nlohmann::json j = Base();
  j["noise"] = {{"validation_csv", path}, {"base_batch", 128}};
  const Scenario s = ParseScenario(j, "late_noise.json", kScenarios);
  const double first = s.NoiseRows().front().progress, last = s.NoiseRows().back().progress;
  ASSERT_GT(first, 3000);        // the first epoch's average, placed at its middle
  size_t before = 0, after = 0;  // decisions before the first row, and with records after it
  detail::Simulator sim(s, 0, "fixed");
  sim.Run("fixed", [&](detail::Simulator& sm, const Config& cur, bool) {
    const auto history = sm.View(cur).noise_history;
    for (const auto& o : history) {
      EXPECT_GE(o.progress, first) << "a record before the trace's first row, at " << sm.hours();
      EXPECT_LE(o.progress, last);
    }
    if (sm.progress() < first) {
      ++before;
      EXPECT_TRUE(history.empty());
    } else if (!history.empty()) {
      ++after;
    }
    return detail::Decision(s.start, false);
  });
  EXPECT_GT(before, 0u);
  ASSERT_GT(after, 1u);
}

// Between two rows of a noise trace the statistics change at a steady rate (geometric in the
// fraction of the way): halfway, each is the geometric mean of the rows', and so is the noise
// scale, whatever the scale of |G|^2. Linear in each component, bert's noise scale halfway between
// its first two rows (|G|^2 falls about 500-fold) would still be within 1 % of the first row's.
TEST(Simulator, NoiseBetweenTheTracesRowsChangesAtASteadyRate) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  nlohmann::json j = Base();
  j["noise"] = {
      {"validation_csv", test::SharedDir() + "/data/traces/pollux-t4/bert/validation-12.csv"},
      {"base_batch", 12}};
  const Scenario s = ParseScenario(j, "bert_noise.json", kScenarios);
  const auto& rows = s.NoiseRows();
  ASSERT_EQ(rows.size(), 2u);
  const core::NoiseObservation &a = rows[0], &b = rows[1];
  ASSERT_GT(a.grad_sqr / b.grad_sqr, 100);
  const core::NoiseState mid = s.NoiseAt(0.5 * (a.progress + b.progress));
  EXPECT_NEAR(mid.grad_sqr, std::sqrt(a.grad_sqr * b.grad_sqr), 1e-9 * mid.grad_sqr);
  EXPECT_NEAR(mid.grad_var, std::sqrt(a.grad_var * b.grad_var), 1e-9 * mid.grad_var);
  const double ra = a.grad_var / a.grad_sqr, rb = b.grad_var / b.grad_sqr;
  EXPECT_NEAR(mid.grad_var / mid.grad_sqr, std::sqrt(ra * rb), 1e-9 * std::sqrt(ra * rb));
  EXPECT_GT(mid.grad_var / mid.grad_sqr, 1.3 * ra);
  // The ends are held.
  EXPECT_DOUBLE_EQ(s.NoiseAt(0).grad_sqr, a.grad_sqr);
  EXPECT_DOUBLE_EQ(s.NoiseAt(2 * b.progress).grad_var, b.grad_var);
}

// The rows' logarithms are taken once, when the scenario is read (IndexNoiseLogs), not at every
// read: the statistics read are the same to the bit, at every batch, between the rows and beyond
// them, and a scenario without the index (built by hand) reads the same.
TEST(Simulator, NoiseReadsTheSameWithTheRowsLogarithmsIndexedOrNot) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = LoadScenario(kScenarios + "/pollux-cifar10-deadline.json");
  ASSERT_EQ(s.noise_logs.size(), s.noise.size());
  ASSERT_GE(s.noise_logs_by_batch.size(), 2u);
  Scenario bare = s;
  bare.noise_logs.clear();
  bare.noise_logs_by_batch.clear();
  int between = 0;
  for (const double batch : {0.0, 128.0, 300.0, 4096.0, 20000.0}) {
    const auto& rows = s.NoiseRows(batch);
    ASSERT_GE(rows.size(), 2u);
    const double top = 1.1 * rows.back().progress;
    for (int i = 0; i <= 400; ++i) {
      const double progress = top * i / 400;
      const core::NoiseState a = s.NoiseAt(progress, batch), b = bare.NoiseAt(progress, batch);
      EXPECT_EQ(a.grad_sqr, b.grad_sqr) << batch << " " << progress;
      EXPECT_EQ(a.grad_var, b.grad_var) << batch << " " << progress;
      between += progress > rows.front().progress && progress < rows.back().progress;
    }
  }
  EXPECT_GT(between, 1000);
}

// Two zones of g4dn.12xlarge (10-minute ticks): zone a has 2 spot nodes for 30 min, then none for
// an hour; zone b has none at first, then 2 from 20 min on. A cluster holds its nodes in the zone
// it launched in. Fixed spot waits for its own zone; managed spot and cloudtune relaunch in the
// other, which has the nodes.
TEST(Simulator, ZonesOfATypeAndFailingOverBetweenThem) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string a = CapacityTrace("g4dn_zone_a.json", "2, 2, 2, 0, 0, 0, 0, 0, 0");
  const std::string b = CapacityTrace("g4dn_zone_b.json", "0, 0");
  nlohmann::json j = Base();
  j["spot"] = {{"reading", "count"},
               {"offset_h", 0},
               {"traces", {{"g4dn.12xlarge", {{"us-west-2a", a}, {"us-west-2b", b}}}}}};
  const Scenario s = ParseScenario(j, "zones.json", kScenarios);
  ASSERT_EQ(s.spot.at("g4dn.12xlarge").zones(), 2u);
  EXPECT_EQ(s.spot.at("g4dn.12xlarge").zone_name(1), "us-west-2b");
  const auto res = RunReplay(s, 0);
  auto Find = [](const std::vector<PolicyResult>& rs, const char* policy) -> PolicyResult {
    for (const auto& r : rs)
      if (r.policy == policy) return r;
    ADD_FAILURE() << "no policy " << policy;
    return {};
  };
  const PolicyResult fixed = Find(res, "fixed-spot");
  const PolicyResult managed = Find(res, "managed-spot");
  ASSERT_GT(Find(res, "fixed-on-demand").makespan_h, 0.5) << "the job must outlast 30 minutes";
  // Fixed spot launched in zone a (the only one with nodes at time 0) and waits an hour for it.
  EXPECT_EQ(fixed.revocations, 1);
  EXPECT_NEAR(fixed.waited_h, 1.0, 1.0 / 60 + 1e-9);
  // Managed spot is revoked too, and relaunches in zone b at once: no wait, sooner, cheaper.
  EXPECT_EQ(managed.revocations, 1);
  EXPECT_EQ(managed.zone_failovers, 1);
  EXPECT_EQ(fixed.zone_failovers, 0);
  EXPECT_LT(managed.waited_h, 1.0 / 60);
  EXPECT_LT(managed.makespan_h, fixed.makespan_h - 0.9);
  EXPECT_LE(managed.cost, fixed.cost);
  // The same with one zone (a): managed spot must wait or pay for on demand.
  nlohmann::json one = j;
  one["spot"]["traces"] = {{"g4dn.12xlarge", a}};
  const PolicyResult alone =
      Find(RunReplay(ParseScenario(one, "zone.json", kScenarios), 0), "managed-spot");
  EXPECT_GT(alone.makespan_h + 1e-9, managed.makespan_h);
  EXPECT_GT(alone.cost, managed.cost);
  // The oracle sees both zones: never dearer than any policy.
  for (const auto& r : res) EXPECT_GE(r.cost, Find(res, "oracle").cost_lower * 0.97) << r.policy;
  // Neither zone has nodes at first; b has them from 20 min on, a from 60, and the policies decide
  // hourly. Fixed spot waits for a, the zone it was launched in. Managed spot, waiting in a too,
  // launches in b at 20 min: it never ran, so that is no revocation and no failover.
  nlohmann::json late = j;
  late["decision_interval_s"] = 3600;
  late["spot"]["traces"]["g4dn.12xlarge"]["us-west-2a"] =
      CapacityTrace("g4dn_zone_a_late.json", "0, 0, 0, 0, 0, 0");
  const auto later = RunReplay(ParseScenario(late, "late.json", kScenarios), 0);
  const PolicyResult launched = Find(later, "managed-spot"), waited = Find(later, "fixed-spot");
  EXPECT_EQ(launched.revocations, 0);
  EXPECT_EQ(launched.zone_failovers, 0);
  EXPECT_NEAR(launched.waited_h, 1.0 / 3, 1.0 / 60 + 1e-9);
  EXPECT_NEAR(waited.waited_h, 1.0, 1.0 / 60 + 1e-9);
  EXPECT_EQ(waited.revocations, 0);
  // A zone's trace is named with its type and zone.
  j["spot"]["traces"]["g4dn.12xlarge"]["us-west-2b"] = "missing.json";
  EXPECT_EQ(ErrorOf(j), "s.json: spot: traces: g4dn.12xlarge: us-west-2b: " + kScenarios +
                            "/missing.json: cannot open");
  j["spot"]["traces"]["g4dn.12xlarge"]["us-west-2b"] = 3;
  EXPECT_EQ(ErrorOf(j), "s.json: spot: traces: g4dn.12xlarge: us-west-2b: expected a path");
  j["spot"]["traces"]["g4dn.12xlarge"] = nlohmann::json::object();
  EXPECT_EQ(ErrorOf(j),
            "s.json: spot: traces: g4dn.12xlarge: expected a path, or zones {\"ZONE\": "
            "\"PATH\", ...}");
}

}  // namespace
}  // namespace cloudtune::replay
