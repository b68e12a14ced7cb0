#include "cli/replay/oracle.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "cli/replay/parallel.h"
#include "estimator/core/error.h"
#include "search/cost.h"
#include "tests/shared_data.h"

namespace cloudtune::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Config Make(int nodes, int gpus, int bsz, Purchase p = Purchase::kOnDemand) {
  Config c;
  c.type = "g4dn.12xlarge";
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.local_bsz = bsz;
  c.purchase = p;
  return c;
}

// A tiny job: three traced configurations of g4dn.12xlarge (global batch 100 or 400), measured
// runs at 100 and 400 (4x the batch takes 3x fewer steps), 10-minute windows, and a spot trace
// with no capacity in the first window.
Scenario Tiny() {
  Scenario s;
  s.name = "tiny";
  s.catalog = DefaultCatalog();
  const Config cs[] = {Make(1, 1, 100), Make(1, 4, 100), Make(2, 4, 50)};
  const double step[] = {0.5, 0.9, 0.7};
  for (int i = 0; i < 3; ++i) {
    s.candidates.push_back(cs[i]);
    core::Measurement m;
    m.key = cs[i].Key();
    m.step_time = step[i];
    m.sync_time = 0;
    m.rows = 1;
    s.traces.push_back(m);
  }
  s.measured = std::make_shared<MeasuredSteps>(MeasuredSteps::Parse(
      {{100, "progress,iteration,metric\n1,1000,0.5\n2,2000,0.7\n3,3000,0.8\n"},
       {400, "progress,iteration,metric\n1,400,0.5\n2,700,0.7\n3,1000,0.8\n"}},
      "tiny"));
  s.base_batch = 100;
  s.target_metric = 0.8;
  s.target_progress = s.ProgressAt(0.8);
  s.start = cs[0];
  s.decision_interval_s = 600;
  s.measure_s = 600;  // the oracle's window with capacity traces
  s.cost.switch_s = 120;
  s.cost.batch_switch_s = 30;
  s.spot_offset_s = 0;
  s.spot.emplace("g4dn.12xlarge",
                 SpotTrace::Parse(R"({"metadata": {"gap_seconds": 600}, "data": [0, 2, 2, 2, 2]})",
                                  "tiny-capacity"));
  return s;
}

struct Best {
  double cost = kInf, time = kInf;
};

// Every schedule of `windows` windows over every configuration (all purchases; spot nodes in each
// zone of the market) and idling, in the oracle's window model with exact progress: the optimum
// the oracle approximates. A job that has waited since time 0 launches as from the start (the
// start itself, on demand or spot, or on spot on fewer of its nodes, for free, when the market has
// fewer than the start's at time 0), in any zone. Moving between zones is a relaunch.
Best BruteForce(const Scenario& s, int windows) {
  const WindowModel model(s, 0);
  const double W = model.window_s();
  const SpotMarket& trace = s.spot.at("g4dn.12xlarge");
  std::vector<Config> all;
  std::vector<int> zone;  // of all[i]'s spot nodes (-1: on demand)
  for (const Config& c : s.candidates)
    for (Purchase p : {Purchase::kOnDemand, Purchase::kSpot, Purchase::kAnchor}) {
      if (p == Purchase::kAnchor && c.nodes < 2) continue;
      Config x = c;
      x.purchase = p;
      for (int z = p == Purchase::kOnDemand ? -1 : 0;
           z < (p == Purchase::kOnDemand ? 0 : static_cast<int>(trace.zones())); ++z) {
        all.push_back(x);
        zone.push_back(z);
      }
    }
  const int idle = static_cast<int>(all.size());
  // Launched free: the start on demand or on spot (in any zone), or on spot on fewer of its nodes
  // (elastic) when the market has fewer than the start's at time 0.
  const bool short_at_start = trace.Available(0, 1 << 20, SpotReading::kCount, 0) < s.start.nodes;
  std::vector<char> free(idle, 0);
  for (int i = 0; i < idle; ++i) {
    Config start = s.start;
    start.purchase = all[i].purchase;
    Config elastic = s.start;
    elastic.purchase = Purchase::kSpot;
    elastic.nodes = all[i].nodes;
    free[i] = (all[i] == start && start.purchase != Purchase::kAnchor) ||
              (all[i] == elastic && elastic.nodes < s.start.nodes && short_at_start);
  }
  auto capacity_ok = [&](int i, int j) {
    const Config& c = all[i];
    const int need = c.purchase == Purchase::kSpot     ? c.nodes
                     : c.purchase == Purchase::kAnchor ? c.nodes - 1
                                                       : 0;
    if (need == 0) return true;
    for (double t = j * W; t < (j + 1) * W; t += 60)
      if (trace.zone(zone[i]).Available(t, 1 << 20, SpotReading::kCount, 0) < need) return false;
    return true;
  };
  Best best;
  std::vector<int> seq(windows, 0);
  std::function<void(int, int, double, double, bool)> go = [&](int j, int prev, double u,
                                                               double cost, bool launched) {
    if (j == windows) return;
    for (int c = 0; c <= idle; ++c) {
      if (c == idle) {
        go(j + 1, launched ? idle : prev, u, cost, launched);
        continue;
      }
      const Config& cfg = all[c];
      if (!capacity_ok(c, j)) continue;
      const bool start = !launched && free[c];
      const bool same_hw = prev != idle && all[prev].SameHardware(cfg) && zone[prev] == zone[c];
      const double sw = prev == c || start ? 0 : same_hw ? s.cost.batch_switch_s : s.cost.switch_s;
      const InstanceType& t = s.catalog.types[s.catalog.Find(cfg.type)];
      const double price = HourlyPrice(t, cfg.nodes, cfg.purchase);
      double fin = -1;
      const double u2 = model.Advance(cfg, u, model.TrainSeconds(cfg, sw), &fin);
      if (fin >= 0) {
        const double secs = sw + fin * (1 + model.CheckpointShare(cfg));
        const double total = cost + secs / 3600 * price;
        if (total < best.cost) best = {total, j * W + secs};
        continue;
      }
      go(j + 1, c, u2, cost + W / 3600 * price, true);
    }
  };
  for (int i = 0; i < idle; ++i)  // from each launch: a batch switch away from its instances
    if (free[i]) go(0, i, model.StartProgress(), 0.0, false);
  return best;
}

TEST(Oracle, DefaultOptionsAreValidAndBadOnesNamed) {
  std::string err;
  EXPECT_TRUE(OracleOptions().IsValid(&err)) << err;
  OracleOptions o;
  o.levels = 1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "levels: must be in [2, 100000]");
  o = {};
  o.window_s = -1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "window_s: must be >= 0");
  const Scenario s = Tiny();
  o = {};
  o.levels = 0;
  try {
    Oracle bad(s, o);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "oracle options: levels: must be in [2, 100000]");
  }
  // Without a deadline, the horizon must be given.
  EXPECT_THROW(Oracle(s).Solve(0), InputError);
}

// The oracle against brute force over every schedule of the tiny job: the schedule it reports is
// no cheaper than the true optimum (it can be followed) and its lower bound no dearer, the two
// within 2 % of each other at 600 progress levels.
TEST(Oracle, MatchesBruteForceOnATinyJob) {
  const Scenario s = Tiny();
  for (int windows : {3, 4, 5}) {
    const Best bf = BruteForce(s, windows);
    ASSERT_LT(bf.cost, kInf) << windows;
    OracleOptions o;
    o.horizon_h = windows * s.decision_interval_s / 3600;
    o.schedule = true;
    const Oracle oracle(s, o);
    const OracleResult r = oracle.Solve(0);
    EXPECT_FALSE(r.schedule.empty());
    ASSERT_TRUE(r.finished);
    EXPECT_LE(r.cost_lower, bf.cost * (1 + 1e-9)) << windows;
    EXPECT_GE(r.cost, bf.cost * (1 - 1e-9)) << windows;
    EXPECT_LT(r.cost, r.cost_lower * 1.02) << "gap at 600 levels, " << windows;
    EXPECT_LE(r.makespan_h, o.horizon_h + 1e-9);
  }
  // The spot capacity matters: with the outage in the first window the cheapest schedule waits it
  // out (idling is free) and ends later.
  Scenario up = Tiny();
  up.spot.erase("g4dn.12xlarge");
  up.spot.emplace("g4dn.12xlarge",
                  SpotTrace::Parse(R"({"metadata": {"gap_seconds": 600}, "data": [2]})", "up"));
  OracleOptions o;
  o.horizon_h = 0.5;
  const OracleResult without = Oracle(up, o).Solve(0), with = Oracle(s, o).Solve(0);
  EXPECT_NEAR(without.cost, with.cost, 1e-9);
  EXPECT_NEAR(with.makespan_h, without.makespan_h + s.decision_interval_s / 3600, 1e-9);
}

// Tiny, with its type's spot capacity in two zones: "a" has the nodes in the first window only,
// "b" from the second window on. Together they have them throughout.
Scenario TinyInTwoZones() {
  Scenario s = Tiny();
  s.spot.erase("g4dn.12xlarge");
  const auto trace = [](const std::string& data, const std::string& name) {
    return SpotTrace::Parse(R"({"metadata": {"gap_seconds": 600}, "data": [)" + data + "]}", name);
  };
  SpotMarket market;
  market.AddZone("a", trace("2, 0, 0, 0, 0, 0", "a"));
  market.AddZone("b", trace("0, 2, 2, 2, 2, 2", "b"));
  s.spot.emplace("g4dn.12xlarge", market);
  return s;
}

// Zones are part of the oracle's configurations: a spot cluster runs on its own zone's capacity,
// and moving to another zone is a relaunch. It agrees with the brute force that charges it, and
// within a deadline of two windows it costs more than on one zone that has the nodes throughout
// (a move between zones was once free: the type's capacity was its best zone's).
TEST(Oracle, PaysARelaunchToMoveBetweenZones) {
  const Scenario s = TinyInTwoZones();
  Scenario one = Tiny();
  one.spot.erase("g4dn.12xlarge");
  one.spot.emplace("g4dn.12xlarge", SpotTrace::Parse(R"({"metadata": {"gap_seconds": 600},
                                                         "data": [2, 2, 2, 2, 2, 2]})",
                                                     "throughout"));
  for (int windows : {2, 3, 4}) {
    OracleOptions o;
    o.horizon_h = windows * s.decision_interval_s / 3600;
    o.schedule = true;
    const OracleResult r = Oracle(s, o).Solve(0);
    const Best bf = BruteForce(s, windows);
    ASSERT_LT(bf.cost, kInf) << windows;
    ASSERT_TRUE(r.finished) << windows;
    EXPECT_LE(r.cost_lower, bf.cost * (1 + 1e-9)) << windows;
    EXPECT_GE(r.cost, bf.cost * (1 - 1e-9)) << windows;
    EXPECT_LT(r.cost, r.cost_lower * 1.02) << windows;
    const OracleResult together = Oracle(one, o).Solve(0);
    ASSERT_TRUE(together.finished);
    if (windows == 2) {
      EXPECT_GT(r.cost, together.cost * 1.05) << "the move from a to b is a relaunch";
      std::string text;
      for (const auto& line : r.schedule) text += line + "\n";
      EXPECT_NE(text.find(" in b"), std::string::npos) << text;
    } else {
      // With room to wait, the job idles through the first window and launches in b for free.
      EXPECT_NEAR(r.cost, together.cost, 1e-9) << windows;
    }
  }
}

// The seconds and the cost of running `c` alone from the start to the target (the oracle's model).
struct AloneRun {
  double seconds = 0, cost = 0;
};
AloneRun RunAlone(const Scenario& s, const Config& c) {
  const WindowModel model(s, 0);
  double fin = -1;
  model.Advance(c, model.StartProgress(), 1e15, &fin);
  if (!(fin > 0)) return {};
  const double run_s = fin * (1 + model.CheckpointShare(c));
  const InstanceType& t = s.catalog.types[s.catalog.Find(c.type)];
  return {run_s, run_s / 3600 * HourlyPrice(t, c.nodes, c.purchase)};
}

// A job that waits for spot capacity from time 0 has not run: it launches when the capacity comes
// without a restart, as the simulator's fixed-spot baseline does. With the horizon exactly that
// wait plus the start's run on spot, the oracle runs that schedule and costs what it costs (it
// once paid a restart there, did not fit the horizon on spot, and cost more than fixed spot).
TEST(Oracle, LaunchesWithoutARestartAfterWaitingForCapacityFromTheStart) {
  Scenario s = Tiny();        // no spot capacity in the first 600-s window
  s.start = Make(1, 4, 100);  // its cheapest configuration: 4 GPUs of one machine
  const AloneRun fixed_spot = RunAlone(s, Make(1, 4, 100, Purchase::kSpot));
  ASSERT_GT(fixed_spot.seconds, 0);
  OracleOptions o;
  o.horizon_h = (WindowModel(s, 0).window_s() + fixed_spot.seconds + 1) / 3600;
  const OracleResult r = Oracle(s, o).Solve(0);
  ASSERT_TRUE(r.finished);
  EXPECT_LE(r.cost, fixed_spot.cost * (1 + 1e-9));
  EXPECT_LE(r.cost_lower, fixed_spot.cost * (1 + 1e-9));
  const Best bf = BruteForce(s, static_cast<int>(std::ceil(o.horizon_h * 3600 / 600)));
  EXPECT_LE(bf.cost, fixed_spot.cost * (1 + 1e-9));
}

// Without a deadline the replay gives the oracle twice the slowest policy's time: capacity that
// comes back within a window is the oracle's from the next window only, so with a horizon just as
// long as a spot run that launched at the minute the capacity came, the oracle could not wait for
// spot and paid for on demand (up to 2.4x that run on the shipped spot traces' variants).
TEST(Oracle, WithoutADeadlineTheHorizonLeavesRoomToWaitForTheNextWindow) {
  Scenario s = Tiny();
  s.start = Make(1, 4, 100);
  s.spot.erase("g4dn.12xlarge");
  std::string data = "0";  // 60-s ticks: no spot capacity for 11 minutes, then 2 nodes
  for (int i = 1; i < 11; ++i) data += ", 0";
  for (int i = 0; i < 200; ++i) data += ", 2";
  s.spot.emplace(
      "g4dn.12xlarge",
      SpotTrace::Parse(R"({"metadata": {"gap_seconds": 60}, "data": [)" + data + "]}", "minutes"));
  const AloneRun spot = RunAlone(s, Make(1, 4, 100, Purchase::kSpot));
  ASSERT_GT(spot.seconds, 0);
  const double slowest_h = (660 + spot.seconds) / 3600;  // launched at the 11th minute
  OracleOptions o;
  o.horizon_h = slowest_h;
  const OracleResult tight = Oracle(s, o).Solve(0);
  ASSERT_TRUE(tight.finished);
  EXPECT_GT(tight.cost, spot.cost * 1.5) << "the run on spot does not fit from the next window";
  o.horizon_h = OracleHorizon(s, slowest_h);
  EXPECT_DOUBLE_EQ(o.horizon_h, 2 * slowest_h);
  const OracleResult r = Oracle(s, o).Solve(0);
  ASSERT_TRUE(r.finished);
  EXPECT_LE(r.cost, spot.cost * (1 + 1e-9));
  EXPECT_NEAR(r.makespan_h, (1200 + spot.seconds) / 3600, 1e-9);  // from the next window
  // With a deadline, the deadline is the horizon, whatever the policies took.
  s.objective.deadline_h = 3 * slowest_h;
  EXPECT_DOUBLE_EQ(OracleHorizon(s, slowest_h), 3 * slowest_h);
}

// Tiny, started on two nodes of 4 GPUs at local batch 50, with the same GPUs and batch on one of
// its two machines traced too (where an elastic launch may start).
Scenario TinyOnTwoNodes() {
  Scenario s = Tiny();
  s.candidates.push_back(Make(1, 4, 50));
  core::Measurement m;
  m.key = s.candidates.back().Key();
  m.step_time = 0.35;
  m.rows = 1;
  s.traces.push_back(m);
  s.start = Make(2, 4, 50);
  return s;
}

// A job launched on spot starts elastically on fewer of the start's nodes (as the replay's
// cloudtune job does when the market has fewer): the oracle launches there without a switch too,
// and agrees with the brute force that does.
TEST(Oracle, LaunchesElasticallyOnFewerOfTheStartsNodes) {
  const Scenario s = TinyOnTwoNodes();
  const AloneRun elastic = RunAlone(s, Make(1, 4, 50, Purchase::kSpot));
  ASSERT_GT(elastic.seconds, 0);
  OracleOptions o;  // the outage, then the run on one node
  o.horizon_h = (WindowModel(s, 0).window_s() + elastic.seconds + 1) / 3600;
  const OracleResult r = Oracle(s, o).Solve(0);
  ASSERT_TRUE(r.finished);
  EXPECT_LE(r.cost, elastic.cost * (1 + 1e-9));
  const Best bf = BruteForce(s, static_cast<int>(std::ceil(o.horizon_h * 3600 / 600)));
  EXPECT_LE(bf.cost, elastic.cost * (1 + 1e-9));
  EXPECT_LE(r.cost_lower, bf.cost * (1 + 1e-9));
  EXPECT_GE(r.cost, bf.cost * (1 - 1e-9));
}

// With all of the start's nodes to be had at time 0, the job is launched on all of them (as the
// replay's cloudtune job is): a move onto fewer is a switch for the oracle too, and it agrees with
// the brute force that charges it.
TEST(Oracle, LaunchesOnTheStartWhenTheMarketHasAllItsNodes) {
  Scenario s = TinyOnTwoNodes();
  s.spot.erase("g4dn.12xlarge");
  s.spot.emplace("g4dn.12xlarge",
                 SpotTrace::Parse(R"({"metadata": {"gap_seconds": 600}, "data": [2, 2, 2, 2, 2]})",
                                  "full-capacity"));
  const AloneRun elastic = RunAlone(s, Make(1, 4, 50, Purchase::kSpot));
  ASSERT_GT(elastic.seconds, 0);
  OracleOptions o;
  o.horizon_h = (elastic.seconds + s.cost.switch_s + 1200) / 3600;
  const OracleResult r = Oracle(s, o).Solve(0);
  ASSERT_TRUE(r.finished);
  const Best bf = BruteForce(s, static_cast<int>(std::ceil(o.horizon_h * 3600 / 600)));
  EXPECT_LE(r.cost_lower, bf.cost * (1 + 1e-9));
  EXPECT_GE(r.cost, bf.cost * (1 - 1e-9));
  EXPECT_GT(r.cost, elastic.cost * (1 + 1e-6));  // no free launch on the one node
}

// A deadline is the horizon: the oracle's schedule ends by it, and a tighter one costs more.
TEST(Oracle, DeadlinesBindTheSchedule) {
  Scenario s = Tiny();
  s.objective.deadline_h = 1.0;
  const OracleResult loose = Oracle(s).Solve(0);
  s.objective.deadline_h = 0.25;
  const OracleResult tight = Oracle(s).Solve(0);
  ASSERT_TRUE(loose.finished);
  ASSERT_TRUE(tight.finished);
  EXPECT_LE(tight.makespan_h, 0.25 + 1e-9);
  EXPECT_GE(tight.cost, loose.cost);
  s.objective.deadline_h = 0.05;  // 3 minutes: not even the fastest configuration finishes
  EXPECT_FALSE(Oracle(s).Solve(0).finished);
}

// On a shipped measured scenario, no replayed policy costs less than the oracle's lower bound
// (beyond what deciding between the oracle's windows can save).
TEST(Oracle, NoReplayedPolicyBeatsItsLowerBound) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = LoadScenario(std::string(CLOUDTUNE_SOURCE_DIR) +
                                  "/data/scenarios/pollux-cifar10-measured.json");
  const Oracle oracle(s);
  for (uint64_t seed : {1, 2}) {
    const auto res = RunReplay(s, seed, &oracle);
    double lower = 0, cost = 0;
    for (const auto& r : res)
      if (r.policy == "oracle") lower = r.cost_lower, cost = r.cost;
    ASSERT_GT(lower, 0);
    EXPECT_GE(cost, lower);
    for (const auto& r : res) EXPECT_GE(r.cost, 0.97 * lower) << r.policy << " seed " << seed;
  }
}

// Refined() is the same oracle at twice the levels, built once.
TEST(Oracle, RefinedDoublesTheLevelsOnce) {
  const Scenario s = Tiny();
  OracleOptions o;
  o.levels = 8;
  o.horizon_h = 0.5;
  const Oracle oracle(s, o);
  const Oracle& finer = oracle.Refined();
  EXPECT_EQ(finer.options().levels, 16);
  EXPECT_EQ(&finer, &oracle.Refined());
  EXPECT_EQ(finer.options().horizon_h, 0.5);
  EXPECT_EQ(finer.Refined().options().levels, 32);
}

// On the shipped 16-node capacity trace, the time goal within $60: at 100 progress levels no
// schedule the oracle can follow stays within the budget, while its lower bound (progress rounded
// up) does: the levels cannot tell. At 200 they can. The quick test (give_up) finds the same
// schedule as the full search when it lies within give_up x the lower bound's time.
TEST(Oracle, CoarseLevelsCannotTellWhatFinerOnesFind) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = LoadScenario(std::string(CLOUDTUNE_SOURCE_DIR) +
                                  "/data/scenarios/pollux-imagenet-budget-spot16.json");
  OracleOptions o;
  o.levels = 100;
  const Oracle coarse(s, o);
  const OracleResult r100 = coarse.Solve(3, 60);
  EXPECT_FALSE(r100.finished);
  ASSERT_TRUE(std::isfinite(r100.cost_lower));
  EXPECT_LE(r100.cost_lower, 60);
  const OracleResult r200 = coarse.Refined().Solve(3, 60);
  ASSERT_TRUE(r200.finished);
  EXPECT_LE(r200.cost, 60);
  EXPECT_GE(r200.makespan_h, r200.makespan_lower_h);
  // The quick test: the same schedule when it lies within give_up x the lower bound's time,
  // nothing when it lies beyond.
  const double ratio = r200.makespan_h / r200.makespan_lower_h;
  ASSERT_GT(ratio, 1.0);
  const OracleResult quick = coarse.Refined().Solve(3, 60, ratio * 1.01);
  ASSERT_TRUE(quick.finished);
  EXPECT_EQ(quick.cost, r200.cost);
  EXPECT_EQ(quick.makespan_h, r200.makespan_h);
  EXPECT_FALSE(coarse.Refined().Solve(3, 60, ratio * 0.99).finished);
}

// The schedule it follows carries each state's exact position between levels, so its cost hardly
// depends on the levels. On a 45-hour job in half-hour windows, where rounding each window's
// progress down to one of 600 levels cost 10 % over the bound at 1,200: 150 levels find the cost of
// 600 within 1 %, and 600 come within 5 % of the bound at 1,200.
TEST(Oracle, ItsScheduleHardlyDependsOnTheLevels) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s =
      LoadScenario(std::string(CLOUDTUNE_SOURCE_DIR) + "/data/scenarios/pollux-imagenet-g4dn.json");
  OracleOptions o;
  o.horizon_h = 60;
  o.levels = 150;
  const OracleResult r150 = Oracle(s, o).Solve(1);
  o.levels = 600;
  const Oracle oracle(s, o);
  const OracleResult r600 = oracle.Solve(1, 0, 0, false);
  const OracleResult r1200 = oracle.Refined().Solve(1, 0, 0, false);
  ASSERT_TRUE(r150.finished && r600.finished && r1200.finished);
  EXPECT_NEAR(r150.cost, r600.cost, 0.01 * r600.cost);
  EXPECT_GE(r600.cost, r1200.cost_lower);
  EXPECT_LE(r600.cost, 1.05 * r1200.cost_lower);
}

// The oracle counts its changes of configuration whether or not its schedule is asked for as
// text, as the simulator counts a policy's (after the first window).
TEST(Oracle, CountsItsSwitchesWithoutTheScheduleText) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = LoadScenario(std::string(CLOUDTUNE_SOURCE_DIR) +
                                  "/data/scenarios/resnet50-multi-gpu-deadline-spot16.json");
  OracleOptions o;
  o.horizon_h = s.objective.deadline_h;
  o.schedule = true;
  const OracleResult text = Oracle(s, o).Solve(5);
  o.schedule = false;
  const OracleResult quiet = Oracle(s, o).Solve(5);
  ASSERT_TRUE(text.finished && quiet.finished);
  EXPECT_TRUE(quiet.schedule.empty());
  ASSERT_GT(text.schedule.size(), 2u);  // a spot trace with outages: it moves
  EXPECT_EQ(text.switches, static_cast<int>(text.schedule.size()) - 1);
  EXPECT_EQ(quiet.switches, text.switches);
}

// The best fixed configuration on a capacity trace: running whenever the capacity is there,
// followed exactly, finds one within this $60 budget that the recursion rounding each window's
// progress down to one of 600 levels does not (4x g4dn.12xlarge on spot, about 12 h).
TEST(Oracle, BestFixedFollowsTheCapacityExactly) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = LoadScenario(std::string(CLOUDTUNE_SOURCE_DIR) +
                                  "/data/scenarios/pollux-imagenet-budget-spot16.json");
  const OracleResult r = Oracle(s).Solve(2, 60);
  ASSERT_GT(r.fixed_cost, 0);
  EXPECT_LE(r.fixed_cost, s.objective.budget_usd);
  EXPECT_LT(r.fixed_makespan_h, 15);
  EXPECT_NE(r.fixed_config.find("spot"), std::string::npos) << r.fixed_config;
  // No single configuration finishes sooner within the budget than the schedule may switch.
  ASSERT_TRUE(r.finished);
  EXPECT_LE(r.makespan_h, r.fixed_makespan_h);
}

// The tables are built on several threads; the optimum is the same on one.
TEST(Oracle, TablesDoNotDependOnTheThreads) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Scenario s = LoadScenario(std::string(CLOUDTUNE_SOURCE_DIR) +
                                  "/data/scenarios/pollux-cifar10-spot16.json");
  OracleOptions one, three;
  one.threads = 1;
  three.threads = 3;
  const Oracle a(s, one), b(s, three);
  ASSERT_EQ(a.configurations(), b.configurations());
  for (uint64_t seed : {1, 4}) {
    const OracleResult x = a.Solve(seed, 4), y = b.Solve(seed, 4);
    ASSERT_TRUE(x.finished);
    EXPECT_EQ(x.cost, y.cost);
    EXPECT_EQ(x.makespan_h, y.makespan_h);
    EXPECT_EQ(x.cost_lower, y.cost_lower);
    EXPECT_EQ(x.fixed_cost, y.fixed_cost);
    EXPECT_EQ(x.fixed_config, y.fixed_config);
  }
}

// Skipping the states that cannot beat the best finish changes nothing but the time: the cost goal
// with and without spot traces, a deadline, the time goal within a budget, and the brute force's
// tiny job, also on two zones. (Under the cost goal the lower bound's recursion prunes against the
// schedule's cost from its first window: its cost_lower and makespan_lower_h are checked here too.)
TEST(Oracle, PruningLeavesTheOptimumAndItsScheduleAsTheyAre) {
  std::vector<std::pair<Scenario, double>> cases;  // scenario, horizon (h)
  const Scenario tiny = Tiny();
  cases.push_back({tiny, 1.0});
  cases.push_back({TinyInTwoZones(), 1.0 / 3});  // a move between zones, paid
  if (::cloudtune::test::HaveSharedData()) {
    const std::string dir = std::string(CLOUDTUNE_SOURCE_DIR) + "/data/scenarios/";
    for (const char* name :
         {"pollux-cifar10-spot16.json", "pollux-imagenet-budget-spot16.json",
          "pollux-imagenet-deadline-tight.json", "pollux-imagenet-multitype.json"})
      cases.push_back({LoadScenario(dir + name), 0});
  }
  int pruned_cases = 0;
  for (const auto& [s, horizon] : cases) {
    OracleOptions on, off;
    on.schedule = off.schedule = true;
    off.prune = false;
    const double h = horizon > 0                  ? horizon
                     : s.objective.deadline_h > 0 ? s.objective.deadline_h
                                                  : 24;
    const Oracle a(s, on), b(s, off);
    for (uint64_t seed : {1, 3}) {
      const OracleResult x = a.Solve(seed, h), y = b.Solve(seed, h);
      EXPECT_EQ(x.finished, y.finished) << s.name;
      EXPECT_EQ(x.cost, y.cost) << s.name;
      EXPECT_EQ(x.makespan_h, y.makespan_h) << s.name;
      EXPECT_EQ(x.cost_lower, y.cost_lower) << s.name;
      EXPECT_EQ(x.makespan_lower_h, y.makespan_lower_h) << s.name;
      EXPECT_EQ(x.fixed_cost, y.fixed_cost) << s.name;
      EXPECT_EQ(x.fixed_config, y.fixed_config) << s.name;
      EXPECT_EQ(x.schedule, y.schedule) << s.name;
      pruned_cases += x.finished;
    }
  }
  EXPECT_GT(pruned_cases, 0);
}

TEST(ParallelFor, RunsEveryIndexOnceAndRethrowsTheFirstError) {
  std::vector<std::atomic<int>> hits(1000);
  ParallelFor(hits.size(), 4, [&](size_t i) { ++hits[i]; });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  std::atomic<int> ran{0};
  EXPECT_THROW(ParallelFor(100, 3,
                           [&](size_t i) {
                             ++ran;
                             if (i == 50) throw std::runtime_error("index 50");
                           }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 100);  // the other indices still ran
  ParallelFor(0, 0, [](size_t) { FAIL() << "no index to run"; });
}

}  // namespace
}  // namespace cloudtune::replay
