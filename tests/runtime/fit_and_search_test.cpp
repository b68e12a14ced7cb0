// The real fit-and-search step a refit runs, on a measured profile: options, the numbers it shares
// with `cloudtune recommend`, spot, stragglers, and the state a restart restores.
#include "plugin/runtime/fit_and_search.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>

#include "plugin/runtime/state.h"
#include "real_job.h"
#include "tests/shared_data.h"

using namespace cloudtune::runtime;
using cloudtune::runtime::testing::RealOptions;
using cloudtune::runtime::testing::RealSnapshot;

TEST(FitAndSearch, OptionsValidation) {
  std::string err;
  FitAndSearchOptions o;
  EXPECT_TRUE(o.IsValid(&err)) << err;  // no target: the rate objective
  o.rate_horizon_hours = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_NE(err.find("rate_horizon_hours"), std::string::npos) << err;
  o = RealOptions();
  o.target.epochs = -1;
  EXPECT_FALSE(o.IsValid(&err));
  o = RealOptions();
  EXPECT_TRUE(o.IsValid(&err)) << err;
  o.instance_type = "no-such-type";
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_NE(err.find("no-such-type"), std::string::npos);
}

TEST(FitAndSearch, SameNumbersAsRecommendOnTheRecordedProfile) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const Snapshot s = RealSnapshot();
  const FitAndSearchOptions o = RealOptions();
  const TunerResult r = MakeFitAndSearch(o)(s, RefitContext{"timer", 1});
  // What `cloudtune recommend --profile placements.csv --instance-type g4dn.12xlarge
  //   --gns 0.02,4,128 --target-progress 20000 --progress 1500 --current TYPE:N:G:B:A` solves.
  cloudtune::search::RecommendRequest req;
  req.profile = s.profile;
  for (auto& m : req.profile) m.key.instance_type = "g4dn.12xlarge";
  req.noise = s.noise;
  cloudtune::search::Config cur;
  cur.type = "g4dn.12xlarge";
  cur.nodes = s.current.num_nodes;
  cur.gpus_per_node = s.gpus_per_node;
  cur.local_bsz = s.current.local_bsz;
  cur.accum_steps = s.current.accum_steps;
  req.current = cur;
  req.options.target_progress = 20000;
  req.options.current_progress = 1500;
  const nlohmann::json cli = cloudtune::search::Recommend(req).ToJson();
  const nlohmann::json& mine = r.recommendation;
  for (const char* k : {"schema", "action", "objective", "current", "proposed", "best_predicted",
                        "in_process", "alternatives", "candidates_evaluated"})
    EXPECT_EQ(mine[k], cli[k]) << k;
  EXPECT_EQ(mine["reason"], cli["reason"]);
  EXPECT_TRUE(mine["models"]["throughput"].is_object());
  EXPECT_TRUE(mine["models"]["efficiency"].is_object());
  EXPECT_EQ(mine["progress"], 1500);
  std::string key =
      cli["action"].get<std::string>() + "|" + cli["proposed"]["description"].get<std::string>();
  if (cli["in_process"]["description"] != cli["proposed"]["description"])
    key += "|" + cli["in_process"]["description"].get<std::string>();
  EXPECT_EQ(r.change_key, key);
  EXPECT_EQ(r.log_line.rfind("cloudtune: " + cli["action"].get<std::string>() + " ", 0), 0u)
      << r.log_line;
  std::printf("%s\n", r.log_line.c_str());
}

// A job that has measured its noise at one batch only decides with the plain theory, observed at
// that batch: the search may grow the batch from there (not from B0, which it may never have run).
TEST(FitAndSearch, OneBatchHistoryIsObservedAtThatBatch) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Snapshot s = RealSnapshot();  // B0 = 128
  for (int i = 0; i < 5; ++i) s.noise_history.push_back({1024, 1000.0 + 100 * i, 0, 0.02, 4.0});
  const TunerResult r = MakeFitAndSearch(RealOptions())(s, RefitContext{"timer", 1});
  ASSERT_TRUE(r.efficiency);
  EXPECT_TRUE(r.efficiency->single_batch());
  EXPECT_DOUBLE_EQ(r.efficiency->max_observed_batch(), 1024);
  EXPECT_EQ(r.recommendation["models"]["efficiency"]["max_observed_batch"], 1024.0);
}

// The bytes a step all-reduces go from the job's snapshot to the throughput model the search
// projects other types with: the cifar10 job (ResNet-18, 44.7 MB) all-reduces over g4dn.12xlarge's
// 50 Gbit/s well below its line rate, so the time beyond its wire time is the host's, and 8
// p3.2xlarge (2.5 Gbit/s) are predicted faster than the line rates' ratio (20x) says.
TEST(FitAndSearch, TheGradientBytesReachTheSearchsThroughputModel) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Snapshot s = RealSnapshot();
  s.gradient_bytes = 4.0 * 11173962;
  const cloudtune::search::RecommendRequest req = BuildRecommendRequest(s, RealOptions());
  EXPECT_EQ(req.gradient_bytes, s.gradient_bytes);
  const cloudtune::search::Catalog& catalog = cloudtune::search::DefaultCatalog();
  const cloudtune::search::InstanceType& p3 = catalog.types[catalog.Find("p3.2xlarge")];
  cloudtune::search::Config c;
  c.type = p3.name;
  c.nodes = 8;
  c.gpus_per_node = 1;
  c.local_bsz = 128;
  const cloudtune::search::ProfilePredictor with(catalog, req.profile, 0.05, req.throughput,
                                                 req.gradient_bytes),
      without(catalog, req.profile, 0.05, req.throughput);
  EXPECT_LT(with.StepTime(p3, c).value, 0.8 * without.StepTime(p3, c).value);
}

// A job on a mixed cluster still reports the configuration it came from; staying there is a
// relaunch, priced like any switch, not the current configuration kept; its parts, when known,
// let the search weigh staying on it.
TEST(FitAndSearch, AMixedClusterMakesStayingOnTheReportedConfigurationARelaunch) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Snapshot s = RealSnapshot();
  EXPECT_FALSE(BuildRecommendRequest(s, RealOptions()).relaunch_current);
  s.mixed_cluster = true;
  const cloudtune::search::RecommendRequest req = BuildRecommendRequest(s, RealOptions());
  EXPECT_TRUE(req.relaunch_current);
  ASSERT_TRUE(req.current.has_value());
  EXPECT_EQ(req.current->local_bsz, s.current.local_bsz);
  EXPECT_FALSE(req.current_mixed.has_value());  // its parts unknown
  // Its parts known: the search weighs staying on it (MixedSearchOptions::current).
  s.mixed_parts = {{"g4dn.12xlarge", 1, 4, cloudtune::core::Purchase::kSpot, 64},
                   {"g4dn.12xlarge", 2, 4, cloudtune::core::Purchase::kOnDemand, 64}};
  const cloudtune::search::RecommendRequest with = BuildRecommendRequest(s, RealOptions());
  ASSERT_TRUE(with.current_mixed.has_value());
  EXPECT_EQ(with.current_mixed->parts.size(), 2u);
  EXPECT_EQ(with.current_mixed->global_batch, 3 * 4 * 64);
}

// The search learns when the job decides again from the refit cadence (a configuration at the
// budget's edge is kept while a cheaper one still fits after that long; see RecommendOptions).
TEST(FitAndSearch, TheSearchDecidesAgainAtTheRefitCadence) {
  Options opt;
  EXPECT_DOUBLE_EQ(SearchOptionsFrom(opt, nullptr).recommend.decide_again_s, opt.refit_seconds);
  opt.refit_seconds = 120;
  EXPECT_DOUBLE_EQ(SearchOptionsFrom(opt, nullptr).recommend.decide_again_s, 120);
}

// A job that watches for revocation notices saves its state on one: the search prices a
// revocation as the restart and a checkpoint when the cloud's warning, less the polling interval,
// covers a checkpoint (AWS's two minutes do; GCP's 30 s do not cover a 30-s checkpoint).
TEST(FitAndSearch, WatchingForNoticesPricesARevocationWithoutLostWork) {
  Options opt;
  EXPECT_EQ(SearchOptionsFrom(opt, nullptr).recommend.cost.notice_s, 0);  // not watching
  opt.preemption_url = "http://169.254.169.254/latest/meta-data/spot/instance-action";
  FitAndSearchOptions o = SearchOptionsFrom(opt, nullptr);
  EXPECT_DOUBLE_EQ(o.recommend.cost.notice_s, 120 - opt.preemption_poll_seconds);
  EXPECT_TRUE(o.recommend.cost.SavesOnNotice(o.recommend.cost.checkpoint_s));
  opt.preemption_poll_seconds = 100;
  EXPECT_DOUBLE_EQ(SearchOptionsFrom(opt, nullptr).recommend.cost.notice_s, 20);
  opt.preemption_poll_seconds = 5;
  opt.preemption_url = "http://metadata.google.internal/computeMetadata/v1/instance/preempted";
  o = SearchOptionsFrom(opt, nullptr);
  EXPECT_DOUBLE_EQ(o.recommend.cost.notice_s, 25);
  EXPECT_FALSE(o.recommend.cost.SavesOnNotice(o.recommend.cost.checkpoint_s));
}

// A spot cluster whose capacity is gone: under the cost goal without a deadline it waits the
// shortage out (stays on spot); with a deadline, or CLOUDTUNE_WAIT_FOR_SPOT=0, staying means on
// demand.
TEST(FitAndSearch, SpotShortageIsWaitedOutOnlyForCostWithoutADeadline) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Snapshot s = RealSnapshot();
  s.purchase = cloudtune::search::Purchase::kSpot;
  s.spot_nodes_available = {{"g4dn.12xlarge", 0}};
  auto search_options = [](const Options& opt) {
    FitAndSearchOptions o = SearchOptionsFrom(opt, nullptr);
    o.instance_type = "g4dn.12xlarge";
    o.target.progress = 20000;
    return o;
  };
  auto request = [&](const Options& opt) {
    return BuildRecommendRequest(s, search_options(opt), false);
  };
  auto purchase_of_current = [&](const Options& opt) { return request(opt).current->purchase; };
  Options opt;
  opt.objective = "cost";
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kSpot);
  EXPECT_TRUE(SearchOptionsFrom(opt, nullptr).recommend.space.wait_for_spot);
  EXPECT_FALSE(request(opt).relaunch_current);  // waits on spot: nothing launched yet
  opt.deadline_hours = 10;
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kOnDemand);
  EXPECT_FALSE(SearchOptionsFrom(opt, nullptr).recommend.space.wait_for_spot);
  // Staying on demand launches the nodes again: the search charges it a switch, as any move.
  EXPECT_TRUE(request(opt).relaunch_current);
  {
    const FitAndSearchOptions o = search_options(opt);
    const TunerResult r = MakeFitAndSearch(o)(s, RefitContext{"timer", 1});
    ASSERT_TRUE(r.decision.has_current);
    EXPECT_EQ(r.decision.current.switch_s, o.recommend.cost.switch_s);
  }
  s.spot_nodes_available = {{"g4dn.12xlarge", 16}};  // capacity enough: it holds its nodes
  EXPECT_FALSE(request(opt).relaunch_current);
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kSpot);
  s.spot_nodes_available = {{"g4dn.12xlarge", 0}};
  opt.deadline_hours = 0;
  EXPECT_TRUE(SearchOptionsFrom(opt, nullptr).recommend.wait_for_spot_over_budget);
  opt.wait_for_spot = false;
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kOnDemand);
  EXPECT_FALSE(SearchOptionsFrom(opt, nullptr).recommend.wait_for_spot_over_budget);
  opt.wait_for_spot = true;
  EXPECT_TRUE(SearchOptionsFrom(opt, nullptr).recommend.observe_batch_first);
  opt.observe_batch_first = false;
  EXPECT_FALSE(SearchOptionsFrom(opt, nullptr).recommend.observe_batch_first);
  opt.observe_batch_first = true;
  opt.objective = "time";
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kOnDemand);
  // The whole step: the recommendation keeps a spot configuration.
  opt.objective = "cost";
  const TunerResult r = MakeFitAndSearch(search_options(opt))(s, RefitContext{"timer", 1});
  EXPECT_EQ(r.decision.proposed.config.purchase, cloudtune::search::Purchase::kSpot)
      << r.decision.reason;
}

TEST(FitAndSearch, DestraggleProfileTakesTheWaitOutOfTheCurrentConfiguration) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Snapshot s = RealSnapshot();
  std::vector<cloudtune::core::Measurement> p = s.profile;
  DestraggleProfile(s.current, 1.5, &p);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].key == s.current) {
      EXPECT_NEAR(p[i].step_time, s.profile[i].step_time / 1.5, 1e-12);
      EXPECT_LT(p[i].sync_time, p[i].step_time);
      EXPECT_GE(p[i].sync_time, 0);
    } else {
      EXPECT_EQ(p[i].step_time, s.profile[i].step_time);  // other configurations untouched
      EXPECT_EQ(p[i].sync_time, s.profile[i].sync_time);
    }
  }
}

TEST(FitAndSearch, AStragglerIsPricedIntoTheRecommendation) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const FitAndSearchOptions o = RealOptions();
  Snapshot healthy = RealSnapshot();
  // The measured times of the current configuration include a worker 1.6x slower than the others.
  Snapshot slowed = healthy;
  for (auto& m : slowed.profile)
    if (m.key == slowed.current) {
      m.sync_time += 0.6 * m.step_time;
      m.step_time *= 1.6;
    }
  slowed.straggler_factor = 1.6;
  const auto fit = MakeFitAndSearch(o);
  const nlohmann::json h = fit(healthy, RefitContext{"timer", 1}).recommendation;
  const nlohmann::json r = fit(slowed, RefitContext{"straggler", 2}).recommendation;
  EXPECT_FALSE(h.contains("straggler"));
  ASSERT_TRUE(r.contains("straggler")) << r.dump();
  const auto& st = r["straggler"];
  EXPECT_DOUBLE_EQ(st["factor"].get<double>(), 1.6);
  // Staying costs the remaining job x the slowdown; replacing costs one restart on top.
  const double cur = r["current"]["cost_usd"].get<double>();
  EXPECT_NEAR(st["keep"]["cost_usd"].get<double>(), 1.6 * cur, 1e-9 * cur);
  EXPECT_GT(st["replace"]["cost_usd"].get<double>(), cur);
  EXPECT_LT(st["replace"]["cost_usd"].get<double>(), st["keep"]["cost_usd"].get<double>());
  EXPECT_EQ(st["advice"], "replace the slow worker");
  EXPECT_NE(r["reason"].get<std::string>().find("straggler slows the current configuration by 60%"),
            std::string::npos)
      << r["reason"];
  // The models see the hardware without the slow worker: the current configuration's predicted
  // cost is that of the healthy run, not 1.6x it.
  EXPECT_NEAR(cur, h["current"]["cost_usd"].get<double>(), 0.05 * cur);
}

TEST(TunerState, SaveRestoreRoundTripThroughTheStateFile) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Snapshot s = RealSnapshot();
  s.noise_history = {{128, 100, 100, 0.03, 3.5}, {256, 900, 500, 0.02, 4.0}};
  const TunerResult r = MakeFitAndSearch(RealOptions())(s, RefitContext{"timer", 1});
  const std::string path = ::testing::TempDir() + "/tuner_state_test.json";
  std::string err;
  ASSERT_TRUE(SaveState(path, MakeSavedState(s, &r.recommendation, "job-1"), &err)) << err;
  const LoadResult loaded = LoadState(path, "job-1");
  ASSERT_EQ(loaded.status, LoadStatus::kLoaded) << loaded.message;
  EXPECT_TRUE(loaded.state->models.contains("throughput"));
  const Snapshot back = RestoreSnapshot(*loaded.state);
  EXPECT_EQ(back.step, s.step);
  EXPECT_EQ(back.gpus_per_node, s.gpus_per_node);  // the hardware it ran, not its key's average
  EXPECT_EQ(back.profile.size(), s.profile.size());
  ASSERT_EQ(back.noise_history.size(), 2u);
  EXPECT_EQ(back.noise_history[1].grad_var, 4.0);
  // The restored snapshot gives the same recommendation as before the restart.
  const TunerResult again = MakeFitAndSearch(RealOptions())(back, RefitContext{"restored", 1});
  EXPECT_EQ(again.change_key, r.change_key);
  EXPECT_EQ(again.recommendation["proposed"], r.recommendation["proposed"]);
  std::remove(path.c_str());
}

// The tuner's record and `cloudtune recommend` on the recorded profile give the same numbers
// (skipped when the CLI has not been built next to this test).
TEST(FitAndSearch, SameNumbersAsTheCli) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string cli = std::string(CLOUDTUNE_BIN_DIR) + "/cloudtune";
  if (::access(cli.c_str(), X_OK) != 0) GTEST_SKIP() << cli << " not built";
  const Snapshot s = RealSnapshot();
  const TunerResult r = MakeFitAndSearch(RealOptions())(s, RefitContext{"timer", 1});
  const std::string out = ::testing::TempDir() + "/tuner_cli_recommend.json";
  char current[256];
  std::snprintf(current, sizeof current, "g4dn.12xlarge:%d:%d:%d:%d", s.current.num_nodes,
                s.gpus_per_node, s.current.local_bsz, s.current.accum_steps);
  const std::string cmd =
      "env -u CLOUDTUNE_CATALOG " + cli + " recommend --profile " +
      std::string(CLOUDTUNE_SHARED_DIR) +
      "/data/traces/pollux-t4/cifar10/placements.csv --instance-type g4dn.12xlarge --gns "
      "0.02,4,128 --target-progress 20000 --progress 1500 --current " +
      current + " --format json -o " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  // Same structure and strings; numbers equal to 1e-9 relative (the fits may differ in the last
  // bits between processes).
  std::function<bool(const nlohmann::json&, const nlohmann::json&)> same =
      [&](const nlohmann::json& a, const nlohmann::json& b) {
        if (a.is_number() && b.is_number()) {
          const double x = a.get<double>(), y = b.get<double>();
          return std::abs(x - y) <= 1e-9 * std::max({1.0, std::abs(x), std::abs(y)});
        }
        if (a.type() != b.type() || a.size() != b.size()) return false;
        if (a.is_object()) {
          for (auto it = a.begin(); it != a.end(); ++it)
            if (!b.contains(it.key()) || !same(it.value(), b[it.key()])) return false;
          return true;
        }
        if (a.is_array()) {
          for (size_t i = 0; i < a.size(); ++i)
            if (!same(a[i], b[i])) return false;
          return true;
        }
        return a == b;
      };
  for (const char* k :
       {"action", "reason", "current", "proposed", "best_predicted", "alternatives"})
    EXPECT_TRUE(same(r.recommendation[k], j[k])) << k << "\n"
                                                 << r.recommendation[k] << "\n"
                                                 << j[k];
  std::remove(out.c_str());
}
