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
#include "real_job.h"
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
using cloudtune::runtime::testing::RealOptions;
using cloudtune::runtime::testing::RealSnapshot;
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

// A restarted job: its restored snapshot is refitted at once ("restored"), and a snapshot the job
// offers before that refit ran posts no other. When the restored snapshot holds nothing usable,
// the job's next snapshot refits at once ("first"), not a timer period later.
TEST(Tuner, ResumedJobRefitsItsRestoredSnapshotFirstAndThenUntilPublished) {
  for (const bool usable : {true, false}) {
    Recorder rec;
    TunerOptions o;
    o.refit_seconds = 3600;
    o.refit_until_published = true;
    Tuner t(
        o,
        [&](const Snapshot& s, const RefitContext& c) -> TunerResult {
          if (s.profile.empty()) throw NotReady("no configuration measured");
          return FakeFit(s, c);
        },
        rec.Sink(), rec.Log());
    t.Resume(std::make_shared<const Snapshot>(MakeSnapshot(10, 2, usable ? 12 : 0)), "restored");
    t.Offer(MakeSnapshot(20, 2, usable ? 12 : 0));  // before the worker runs: no second refit
    t.Start();
    ASSERT_TRUE(WaitFor([&] { return t.Stats().refits + t.Stats().fit_errors >= 1; }, 30));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(t.Stats().refits + t.Stats().fit_errors, 1u);
    if (usable) {
      ASSERT_TRUE(WaitFor([&] { return rec.NumRecords() == 1; }, 30));
      EXPECT_EQ(rec.records[0].second["trigger"], "restored");
      EXPECT_EQ(rec.records[0].second["step"], 20);  // the newest snapshot at the refit
    } else {
      EXPECT_EQ(rec.NumRecords(), 0u);
      t.Offer(MakeSnapshot(30, 2));
      ASSERT_TRUE(WaitFor([&] { return rec.NumRecords() == 1; }, 30));
      EXPECT_EQ(rec.records[0].second["trigger"], "first");
    }
    t.Stop();
  }
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
  unsigned long long refits_warm = 0;
  const auto start = Clock::now();
  // At least 100k hand-offs, and on until three refits have run after the warm mark, so the
  // count of refits does not depend on how fast this machine fits (capped at two minutes).
  long step = 1;
  for (;; ++step) {
    if (step > 100000 && step % 1000 == 0) {
      const bool enough = hwm_warm > 0 && t.Stats().refits >= refits_warm + 3;
      if (enough || Clock::now() - start > std::chrono::minutes(2)) break;
    }
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
      refits_warm = t.Stats().refits;
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const long hwm_end = ProcStatusKb("VmHWM");
  t.Stop();
  const auto s = t.Stats();
  std::printf(
      "soak (real refits): %ld hand-offs in %.2f s, refits %llu, errors %llu; VmHWM "
      "after %ld steps (%llu refits) %ld kB, at the end %ld kB\n",
      step - 1, wall, (unsigned long long)s.refits, (unsigned long long)s.fit_errors, step_warm,
      refits_warm, hwm_warm, hwm_end);
  EXPECT_EQ(s.fit_errors, 0u);
  ASSERT_GT(hwm_warm, 0) << "fewer than 2 refits ran";
  EXPECT_GE(s.refits, refits_warm + 3) << "the memory check needs refits after the warm mark";
  EXPECT_LT(hwm_end - hwm_warm, 4096) << "peak RSS grew by more than 4 MiB";
}
