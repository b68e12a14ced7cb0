#include "plugin/runtime/tuner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>

#include "plugin/runtime/http_server.h"
#include "plugin/runtime/state.h"
#include "test_util.h"
#include "tests/shared_data.h"

using namespace cloudtune::runtime;

// Peak-RSS soaks measure the allocator; AddressSanitizer keeps freed memory in quarantine (and
// runs several times slower), so their bounds mean nothing there.
#if defined(__SANITIZE_ADDRESS__)
#define CLOUDTUNE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLOUDTUNE_ASAN 1
#endif
#endif
#ifdef CLOUDTUNE_ASAN
#define SKIP_UNDER_ADDRESS_SANITIZER() \
  GTEST_SKIP() << "peak RSS is not meaningful under AddressSanitizer"
#else
#define SKIP_UNDER_ADDRESS_SANITIZER() (void)0
#endif
using cloudtune::runtime::testing::ProcStatusKb;
using cloudtune::runtime::testing::WaitFor;
using Clock = std::chrono::steady_clock;

namespace {

Snapshot MakeSnapshot(long long step, int replicas, int configs = 12) {
  Snapshot s;
  s.step = step;
  s.progress = static_cast<double>(step);
  s.current = {1, replicas, 32, 0, "local"};
  for (int i = 0; i < configs; ++i) {
    cloudtune::core::Measurement m;
    m.key = {1, 1 + i % 4, 16 << (i / 4), 0, "local"};
    m.step_time = 0.1 + 0.01 * i;
    m.sync_time = 0.01;
    m.rows = 50;
    s.profile.push_back(m);
  }
  s.noise = {1.0, 100.0, 32, false};
  return s;
}

// A fake fit-and-search: proposes twice the current replicas; the change key is the proposal.
TunerResult FakeFit(const Snapshot& s, const RefitContext& ctx) {
  TunerResult r;
  const int proposed = s.current.num_replicas * 2;
  r.recommendation = {{"schema", "test/1"},
                      {"current_replicas", s.current.num_replicas},
                      {"proposed_replicas", proposed},
                      {"step", s.step},
                      {"refit", ctx.index}};
  r.change_key = std::to_string(proposed);
  r.log_line = "cloudtune: propose " + std::to_string(proposed) + " replicas";
  return r;
}

struct Recorder {
  std::mutex mu;
  std::vector<std::pair<std::string, nlohmann::json>> records;
  std::vector<std::string> lines;
  RecordSink Sink() {
    return [this](const std::string& kind, const nlohmann::json& j) {
      std::lock_guard<std::mutex> l(mu);
      records.emplace_back(kind, j);
    };
  }
  LogFn Log() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu);
      lines.push_back(line);
    };
  }
  size_t NumRecords() {
    std::lock_guard<std::mutex> l(mu);
    return records.size();
  }
  size_t NumLines() {
    std::lock_guard<std::mutex> l(mu);
    return lines.size();
  }
};

}  // namespace

TEST(Tuner, DefaultOptionsAreValid) {
  std::string err;
  EXPECT_TRUE(TunerOptions{}.IsValid(&err)) << err;
  EXPECT_EQ(TunerOptions{}.refit_seconds, 30);
  TunerOptions o;
  o.refit_seconds = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_NE(err.find("refit_seconds"), std::string::npos);
  o.refit_seconds = std::nan("");
  EXPECT_FALSE(o.IsValid(&err));
  o = {};
  o.final_refit_seconds = -1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_NE(err.find("final_refit_seconds"), std::string::npos);
}

TEST(Tuner, PublishesPeriodicallyButSinksOnlyOnChange) {
  Recorder rec;
  TunerOptions o;
  o.refit_seconds = 0.01;
  Tuner t(o, FakeFit, rec.Sink(), rec.Log());
  EXPECT_EQ(t.Latest(), nullptr);
  t.Start();
  for (int i = 1; i <= 5; ++i) {
    t.Offer(MakeSnapshot(i * 100, 2));
    const auto before = t.Stats().refits;
    ASSERT_TRUE(WaitFor([&] { return t.Stats().refits > before; }, 5));
  }
  // Five refits of new data, same proposal: one record, one line; Latest has the newest numbers.
  EXPECT_EQ(rec.NumRecords(), 1u);
  EXPECT_EQ(rec.NumLines(), 1u);
  ASSERT_TRUE(WaitFor([&] { return (*t.Latest())["step"] == 500; }, 5));
  EXPECT_EQ(rec.records[0].first, "recommendation");
  EXPECT_EQ(rec.records[0].second["proposed_replicas"], 4);
  EXPECT_EQ(rec.records[0].second["trigger"], "timer");
  EXPECT_EQ(rec.lines[0], "cloudtune: propose 4 replicas");
  // No new snapshots: periodic refits are skipped, not repeated.
  const auto refits = t.Stats().refits;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(t.Stats().refits, refits);
  EXPECT_GT(t.Stats().skipped, 0u);
  t.Stop();
}

TEST(Tuner, ConfigurationChangeRefitsImmediately) {
  Recorder rec;
  TunerOptions o;
  o.refit_seconds = 3600;  // the timer will not fire during this test
  Tuner t(o, FakeFit, rec.Sink(), rec.Log());
  t.Start();
  t.Offer(MakeSnapshot(10, 2));
  t.Offer(MakeSnapshot(20, 2));  // same configuration: no refit
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(t.Stats().refits, 0u);
  const auto t0 = Clock::now();
  t.Offer(MakeSnapshot(30, 4));  // changed: refit now
  ASSERT_TRUE(WaitFor([&] { return rec.NumRecords() == 1; }, 5));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  EXPECT_EQ(rec.records[0].second["trigger"], "config_change");
  EXPECT_EQ(rec.records[0].second["proposed_replicas"], 8);
  EXPECT_EQ((*t.Latest())["current_replicas"], 4);
  // An explicit request (e.g. after a preemption notice) refits too, and carries its reason.
  t.Offer(MakeSnapshot(40, 3));
  ASSERT_TRUE(WaitFor([&] { return rec.NumRecords() == 2; }, 5));
  t.RequestRefit("preemption");
  ASSERT_TRUE(WaitFor([&] { return t.Stats().refits == 3; }, 5));
  EXPECT_EQ(rec.NumRecords(), 2u);  // same proposal (6): no new record
  t.Stop();
}

TEST(Tuner, HandOffDoesNotBlockWhileAFitRuns) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, entered = false;
  auto slow_fit = [&](const Snapshot& s, const RefitContext& c) {
    std::unique_lock<std::mutex> l(mu);
    entered = true;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
    return FakeFit(s, c);
  };
  TunerOptions o;
  o.refit_seconds = 0.001;
  Tuner t(o, slow_fit);
  t.Start();
  t.Offer(MakeSnapshot(1, 2));
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(5), [&] { return entered; }));
  }
  // The worker is stuck inside the fit: hand-offs and reads must still return at once.
  const Snapshot proto = MakeSnapshot(2, 2);
  double worst = 0;
  const auto start = Clock::now();
  for (int i = 0; i < 10000; ++i) {
    auto p = std::make_shared<const Snapshot>(proto);
    const auto a = Clock::now();
    t.Offer(std::move(p));
    auto latest = t.Latest();
    worst = std::max(worst, std::chrono::duration<double>(Clock::now() - a).count());
    EXPECT_EQ(latest, nullptr);
  }
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("10000 hand-offs while the worker is busy: %.3f ms total, worst %.1f us\n",
              total * 1e3, worst * 1e6);
  EXPECT_LT(worst, 0.05);  // generous bound for a loaded CI machine; typical is < 10 us
  EXPECT_EQ(t.Stats().snapshots, 10001u);
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(WaitFor([&] { return t.Latest() != nullptr; }, 5));
  t.Stop();
}

TEST(Tuner, FitErrorsNeverEscapeAndAreLoggedOnce) {
  Recorder rec;
  TunerOptions o;
  o.refit_seconds = 0.005;
  int calls = 0;
  Tuner t(
      o,
      [&](const Snapshot& s, const RefitContext& c) -> TunerResult {
        if (++calls <= 5) throw std::runtime_error("ceres: no convergence");
        return FakeFit(s, c);
      },
      rec.Sink(), rec.Log());
  t.Start();
  for (int i = 0; i < 6; ++i) {
    t.Offer(MakeSnapshot(i, 2));
    ASSERT_TRUE(WaitFor([&] { return t.Stats().fit_errors + t.Stats().refits > (unsigned)i; }, 5));
  }
  EXPECT_EQ(t.Stats().fit_errors, 5u);
  EXPECT_EQ(t.Stats().refits, 1u);
  // refits counts the fit before the worker writes its record and line: wait for them.
  ASSERT_TRUE(WaitFor([&] { return rec.NumLines() >= 2 && rec.NumRecords() >= 1; }, 5));
  EXPECT_NE(rec.lines[0].find("ceres: no convergence"), std::string::npos) << rec.lines[0];
  EXPECT_EQ(rec.NumLines(), 2u);  // the error once + the recommendation line
  EXPECT_EQ(rec.NumRecords(), 1u);
  // Non-std exceptions and a throwing sink are contained too.
  Tuner t2(
      o, [](const Snapshot&, const RefitContext&) -> TunerResult { throw 42; },
      [](const std::string&, const nlohmann::json&) { throw std::runtime_error("disk full"); });
  t2.Start();
  t2.Offer(MakeSnapshot(1, 1));
  ASSERT_TRUE(WaitFor([&] { return t2.Stats().fit_errors >= 1; }, 5));
  t2.Stop();
  Tuner t3(o, FakeFit, [](const std::string&, const nlohmann::json&) {
    throw std::runtime_error("disk full");
  });
  t3.Start();
  t3.Offer(MakeSnapshot(1, 1));
  ASSERT_TRUE(WaitFor([&] { return t3.Stats().published >= 1; }, 5));
  t3.Stop();
}

// A job that ends before its first periodic refit still leaves one recommendation ("end").
TEST(Tuner, ShortJobGetsARecommendationAtStop) {
  for (const double final_wait : {5.0, 0.0}) {
    Recorder rec;
    TunerOptions o;
    o.refit_seconds = 3600;
    o.final_refit_seconds = final_wait;
    Tuner t(o, FakeFit, rec.Sink(), rec.Log());
    t.Start();
    t.Offer(MakeSnapshot(40, 2));
    t.Stop();
    if (final_wait > 0) {
      ASSERT_EQ(rec.NumRecords(), 1u);
      EXPECT_EQ(rec.records[0].second["trigger"], "end");
      EXPECT_EQ(rec.records[0].second["step"], 40);
    } else {
      EXPECT_EQ(rec.NumRecords(), 0u);
    }
  }
}

TEST(Tuner, ShutdownIsCleanAndIdempotent) {
  { Tuner never_started(TunerOptions{}, FakeFit); }  // destructor without Start
  TunerOptions o;
  o.refit_seconds = 0.001;
  // Stop while a fit is running: waits for that fit (200 ms) and no more.
  std::atomic<bool> in_fit{false};
  Tuner t(o, [&](const Snapshot& s, const RefitContext& c) {
    in_fit = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return FakeFit(s, c);
  });
  t.Start();
  t.Offer(MakeSnapshot(1, 2));
  ASSERT_TRUE(WaitFor([&] { return in_fit.load(); }, 5));
  const auto a = Clock::now();
  t.Stop();
  const double took = std::chrono::duration<double>(Clock::now() - a).count();
  EXPECT_LT(took, 1.5);
  t.Stop();                     // idempotent
  t.Offer(MakeSnapshot(2, 8));  // harmless after Stop
  t.RequestRefit("late");
  // A long refit period does not delay Stop.
  Tuner idle(TunerOptions{}, FakeFit);
  idle.Start();
  const auto b = Clock::now();
  idle.Stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - b).count(), 0.5);
}

// Soak: 100,000 hand-offs (one per simulated training step, each a full snapshot with a 12-config
// profile) while the worker refits every millisecond. Peak RSS must stay flat after warm-up.
TEST(TunerSoak, HundredThousandHandOffsHoldMemoryFlat) {
  SKIP_UNDER_ADDRESS_SANITIZER();
  Recorder rec;
  TunerOptions o;
  o.refit_seconds = 0.001;
  Tuner t(o, FakeFit, rec.Sink(), rec.Log());
  t.Start();
  const long hwm_start = ProcStatusKb("VmHWM");
  long hwm_warm = 0;
  const auto start = Clock::now();
  double offer_seconds = 0;
  for (long step = 1; step <= 100000; ++step) {
    // The configuration changes every 20,000 steps, as after a resize.
    auto snap = std::make_shared<const Snapshot>(
        MakeSnapshot(step, 2 + static_cast<int>((step - 1) / 20000)));
    const auto a = Clock::now();
    t.Offer(std::move(snap));
    offer_seconds += std::chrono::duration<double>(Clock::now() - a).count();
    if (step % 64 == 0) (void)t.Latest();
    if (step == 10000) hwm_warm = ProcStatusKb("VmHWM");
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const long hwm_end = ProcStatusKb("VmHWM");
  // The last configuration's refit may still be queued: let it run before stopping.
  ASSERT_TRUE(WaitFor([&] { return t.Stats().published >= 5; }, 10));
  t.Stop();
  const auto s = t.Stats();
  std::printf(
      "soak: 100000 hand-offs in %.3f s (Offer mean %.3f us), refits %llu, published %llu; "
      "VmHWM start %ld kB, after 10k %ld kB, after 100k %ld kB; VmRSS now %ld kB\n",
      wall, offer_seconds / 1e5 * 1e6, (unsigned long long)s.refits,
      (unsigned long long)s.published, hwm_start, hwm_warm, hwm_end, ProcStatusKb("VmRSS"));
  ::testing::Test::RecordProperty("vmhwm_after_10k_kb", std::to_string(hwm_warm));
  ::testing::Test::RecordProperty("vmhwm_after_100k_kb", std::to_string(hwm_end));
  EXPECT_EQ(s.snapshots, 100000u);
  EXPECT_GT(s.refits, 10u);
  EXPECT_EQ(s.published, 5u);  // one per configuration (2,3,4,5,6 replicas → 5 proposals)
  EXPECT_EQ(rec.NumRecords(), 5u);
  EXPECT_LT(hwm_end - hwm_warm, 4096) << "peak RSS grew by more than 4 MiB over 90k hand-offs";
}

// ---- the real fit-and-search step on a real profile
// ----------------------------------------------

namespace {

FitAndSearchOptions RealOptions() {
  FitAndSearchOptions o;
  o.instance_type = "g4dn.12xlarge";
  o.target.progress = 20000;
  o.recommend.objective.goal = cloudtune::search::Goal::kCost;
  return o;
}

Snapshot RealSnapshot() {
  Snapshot s;
  s.profile = cloudtune::estimator::ReadTraces(
      {std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/cifar10/placements.csv"});
  // Run on the most-measured configuration.
  const cloudtune::core::Measurement* most = &s.profile[0];
  for (const auto& m : s.profile)
    if (m.rows > most->rows) most = &m;
  s.current = most->key;
  s.gpus_per_node = most->max_gpus_per_node;
  s.noise = {0.02, 4.0, 128, false};
  s.progress = 1500;
  s.step = 3000;
  return s;
}

}  // namespace

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
  auto purchase_of_current = [&](const Options& opt) {
    FitAndSearchOptions o = SearchOptionsFrom(opt, nullptr);
    o.instance_type = "g4dn.12xlarge";
    o.target.progress = 20000;
    return BuildRecommendRequest(s, o, false).current->purchase;
  };
  Options opt;
  opt.objective = "cost";
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kSpot);
  EXPECT_TRUE(SearchOptionsFrom(opt, nullptr).recommend.space.wait_for_spot);
  opt.deadline_hours = 10;
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kOnDemand);
  EXPECT_FALSE(SearchOptionsFrom(opt, nullptr).recommend.space.wait_for_spot);
  opt.deadline_hours = 0;
  EXPECT_TRUE(SearchOptionsFrom(opt, nullptr).recommend.wait_for_spot_over_budget);
  opt.wait_for_spot = false;
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kOnDemand);
  EXPECT_FALSE(SearchOptionsFrom(opt, nullptr).recommend.wait_for_spot_over_budget);
  opt.wait_for_spot = true;
  opt.objective = "time";
  EXPECT_EQ(purchase_of_current(opt), cloudtune::search::Purchase::kOnDemand);
  // The whole step: the recommendation keeps a spot configuration.
  opt.objective = "cost";
  FitAndSearchOptions o = SearchOptionsFrom(opt, nullptr);
  o.instance_type = "g4dn.12xlarge";
  o.target.progress = 20000;
  const TunerResult r = MakeFitAndSearch(o)(s, RefitContext{"timer", 1});
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

// A started tuner that refits every 10 ms with the real fit-and-search, recording into `rec`.
static std::unique_ptr<Tuner> StartedRealTuner(Recorder* rec) {
  TunerOptions to;
  to.refit_seconds = 0.01;
  auto t = std::make_unique<Tuner>(to, MakeFitAndSearch(RealOptions()), rec->Sink(), rec->Log());
  t->Start();
  return t;
}

TEST(FitAndSearch, RunsInTheTunerAndReportsMissingInputsOnce) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Recorder rec;
  const auto tuner = StartedRealTuner(&rec);
  Tuner& t = *tuner;
  Snapshot early = RealSnapshot();
  early.noise = {};  // no gradient noise measured yet
  t.Offer(early);
  ASSERT_TRUE(WaitFor([&] { return t.Stats().fit_errors >= 1; }, 10));
  t.Offer(RealSnapshot());
  ASSERT_TRUE(WaitFor([&] { return rec.NumRecords() == 1; }, 30));
  t.RequestRefit("preemption");
  ASSERT_TRUE(WaitFor([&] { return t.Stats().refits >= 2; }, 30));
  t.Stop();
  EXPECT_EQ(rec.records[0].first, "recommendation");
  EXPECT_EQ(rec.records[0].second["schema"], "cloudtune.recommendation/1");
  EXPECT_NE(rec.lines[0].find("no gradient noise estimate yet"), std::string::npos) << rec.lines[0];
  EXPECT_EQ((*t.Latest())["preempted"], true);
}

// A job that trains on past its target progress (to the end of its last epoch, say) has nothing
// left to plan: the tuner says so once, publishes nothing, and counts no error.
TEST(FitAndSearch, AReachedTargetIsSaidOnceAndIsNoError) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Recorder rec;
  const auto tuner = StartedRealTuner(&rec);
  Tuner& t = *tuner;
  Snapshot done = RealSnapshot();
  done.progress = 20000;  // RealOptions' target
  t.Offer(done);
  ASSERT_TRUE(WaitFor([&] { return t.Stats().skipped >= 2; }, 10));
  done.step += 100;
  t.Offer(done);
  ASSERT_TRUE(WaitFor([&] { return t.Stats().skipped >= 3; }, 10));
  t.Stop();
  EXPECT_EQ(t.Stats().fit_errors, 0u);
  EXPECT_EQ(rec.NumRecords(), 0u);
  ASSERT_EQ(rec.lines.size(), 1u);
  EXPECT_NE(rec.lines[0].find("the target progress is reached (20000.0 of 20000.0 B0-steps)"),
            std::string::npos)
      << rec.lines[0];
}

TEST(TunerHttp, ProvidersServeTheTunersLatestState) {
  TunerOptions to;
  to.refit_seconds = 0.01;
  Tuner t(to, [](const Snapshot& s, const RefitContext&) {
    TunerResult r;
    r.recommendation = {
        {"schema", "cloudtune.recommendation/1"},
        {"objective", "cost"},
        {"current", {{"price_per_hour", 3.912}, {"cost_usd", 10.0}}},
        {"proposed",
         {{"price_per_hour", 1.5}, {"cost_usd", 7.5}, {"throughput", 900.0}, {"goodput", 2.0}}},
        {"step", s.step}};
    r.change_key = "x";
    return r;
  });
  HttpServer server(HttpOptions{},
                    MakeHttpProviders(t, [](MetricsSnapshot* m) { m->preemption_notice = 0; }));
  std::string err;
  ASSERT_TRUE(server.Start(&err)) << err;
  const int port = server.BoundPort();
  using cloudtune::runtime::testing::Get;
  EXPECT_EQ(Get(port, "/v1/recommendation").status, 503);  // nothing yet
  EXPECT_EQ(Get(port, "/v1/profile").status, 200);
  t.Start();
  Snapshot s = MakeSnapshot(500, 2);
  s.current = s.profile[1].key;  // a measured configuration: 1 node, 2 replicas, bsz 16
  t.Offer(s);
  ASSERT_TRUE(WaitFor([&] { return t.Latest() != nullptr; }, 5));
  auto r = Get(port, "/v1/recommendation");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body)["step"], 500);
  r = Get(port, "/metrics");
  ASSERT_EQ(r.status, 200);
  const auto has = [&](const std::string& s) { return r.body.find(s) != std::string::npos; };
  EXPECT_TRUE(has("\ncloudtune_step_time_seconds 0.11\n")) << r.body;
  EXPECT_TRUE(has("\ncloudtune_num_replicas 2\n"));
  EXPECT_TRUE(has("\ncloudtune_cost_rate_usd_per_hour 3.9"));
  EXPECT_TRUE(has("\ncloudtune_predicted_cost_rate_usd_per_hour 1.5\n"));
  EXPECT_TRUE(has("\ncloudtune_predicted_gain_ratio 0.25\n"));
  EXPECT_TRUE(has("\ncloudtune_predicted_goodput_samples_per_second 64\n"));  // 2 B0-steps/s x 32
  EXPECT_TRUE(has("\ncloudtune_gradient_noise_scale_samples 3200\n"));        // 32 x 100 / 1
  EXPECT_TRUE(has("\ncloudtune_preemption_notice 0\n"));
  EXPECT_TRUE(has("# TYPE cloudtune_goodput_samples_per_second gauge"));
  r = Get(port, "/v1/profile?format=csv");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(std::count(r.body.begin(), r.body.end(), '\n'), 13) << r.body;  // header + 12 rows
  r = Get(port, "/v1/profile");
  const auto pj = nlohmann::json::parse(r.body);
  EXPECT_EQ(pj["schema"], "cloudtune.profile/1");
  EXPECT_EQ(pj["configurations"].size(), 12u);
  EXPECT_EQ(pj["noise"]["noise_scale"], 3200.0);
  server.Stop();
  t.Stop();
}

// Soak with the real fit-and-search refitting in the background: memory stays flat once the
// first refits have run.
TEST(TunerSoak, HundredThousandHandOffsWithRealRefits) {
  SKIP_UNDER_ADDRESS_SANITIZER();
  CLOUDTUNE_NEEDS_SHARED_DATA();
  TunerOptions to;
  to.refit_seconds = 0.02;
  Tuner t(to, MakeFitAndSearch(RealOptions()));
  t.Start();
  const Snapshot proto = RealSnapshot();
  long hwm_warm = -1;
  long step_warm = 0;
  const auto start = Clock::now();
  for (long step = 1; step <= 100000; ++step) {
    auto snap = std::make_shared<Snapshot>(proto);
    snap->step = step;
    snap->progress = 1500 + step * 0.01;
    t.Offer(std::shared_ptr<const Snapshot>(std::move(snap)));
    // ~5 us of "training" per step so that refits run during the hand-offs.
    const auto until = Clock::now() + std::chrono::microseconds(5);
    while (Clock::now() < until) {
    }
    if (hwm_warm < 0 && step % 1000 == 0 && t.Stats().refits >= 2) {
      hwm_warm = ProcStatusKb("VmHWM");
      step_warm = step;
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const long hwm_end = ProcStatusKb("VmHWM");
  t.Stop();
  const auto s = t.Stats();
  std::printf(
      "soak (real refits): 100000 hand-offs in %.2f s, refits %llu, errors %llu; VmHWM "
      "after %ld steps (2 refits) %ld kB, after 100k %ld kB\n",
      wall, (unsigned long long)s.refits, (unsigned long long)s.fit_errors, step_warm, hwm_warm,
      hwm_end);
  EXPECT_EQ(s.fit_errors, 0u);
  ASSERT_GT(hwm_warm, 0) << "fewer than 2 refits ran";
  EXPECT_GE(s.refits, 3u);
  EXPECT_LT(hwm_end - hwm_warm, 4096) << "peak RSS grew by more than 4 MiB";
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
