// The job history: records round-trip through SQLite, two processes writing at once lose nothing,
// a corrupt or foreign file is refused with its path, and a warm start from an earlier job of the
// same model reaches its first useful recommendation in fewer measurement intervals than a cold
// one.
#include "plugin/runtime/history.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "estimator/core/trace.h"
#include "plugin/runtime/fit_and_search.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune::runtime {
namespace {

namespace fs = std::filesystem;
const std::string kData = std::string(CLOUDTUNE_SOURCE_DIR) + "/tests/data/";

std::string TempDb(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("cloudtune_history_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  fs::remove(path);
  fs::remove(path + "-wal");
  fs::remove(path + "-shm");
  return path;
}

HistoryJob Job(const std::string& signature, const std::string& id, int configs) {
  HistoryJob j;
  j.job_id = id;
  j.signature = signature;
  j.parameters = 1000;
  j.instance_type = "g4dn.12xlarge";
  j.objective = "cost";
  j.steps = 500;
  j.progress = 480.5;
  j.hours = 0.25;
  j.cost_usd = 1.5;
  for (int i = 0; i < configs; ++i) {
    core::Measurement m;
    m.key = {1, 1 + i, 32, 0, "g4dn.12xlarge"};
    m.step_time = 0.1 + 0.01 * i;
    m.sync_time = 0.01;
    m.rows = 40;
    j.configurations.push_back(m);
  }
  j.noise = {{64, 10, 10, 0.5, 1.0}, {64, 20, 20, 0.4, 1.1}};
  j.last_noise = {0.4, 1.1, 64, false};
  j.models = {{"throughput", {{"schema", "cloudtune.throughput_model/2"}}}};
  return j;
}

TEST(History, DefaultOptionsAreValid) {
  std::string error;
  EXPECT_TRUE(HistoryOptions{}.IsValid(&error)) << error;
  HistoryOptions o;
  o.busy_timeout_seconds = 0;
  EXPECT_FALSE(o.IsValid(&error));
}

TEST(History, SignatureIsTheShapesInOrder) {
  const auto a = MakeSignature({{10, 5}, {5}});
  EXPECT_EQ(a.parameters, 55);
  EXPECT_EQ(a.ToString(), MakeSignature({{10, 5}, {5}}).ToString());
  EXPECT_NE(a.shapes_hash, MakeSignature({{5}, {10, 5}}).shapes_hash);
  EXPECT_NE(a.shapes_hash, MakeSignature({{10}, {5, 5}}).shapes_hash);
  EXPECT_NE(a.shapes_hash, MakeSignature({{50, 1}, {5}}).shapes_hash);
}

TEST(History, RecordsRoundTrip) {
  const std::string path = TempDb("roundtrip.sqlite");
  std::string error;
  auto h = History::Open(path, {}, &error);
  ASSERT_TRUE(h) << error;
  const long long a = h->Record(Job("1000-aa", "first", 3), &error);
  const long long b = h->Record(Job("1000-bb", "other model", 1), &error);
  const long long c = h->Record(Job("1000-aa", "second", 2), &error);
  ASSERT_GT(a, 0) << error;
  ASSERT_GT(c, b);
  const auto list = h->List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].job_id, "second");          // newest first
  EXPECT_TRUE(list[0].configurations.empty());  // the list is brief
  const auto latest = h->Latest("1000-aa");
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->id, c);
  ASSERT_EQ(latest->configurations.size(), 2u);
  EXPECT_EQ(latest->configurations[1].key.num_replicas, 2);
  EXPECT_DOUBLE_EQ(latest->configurations[1].step_time, 0.11);
  EXPECT_EQ(latest->configurations[1].rows, 40);
  ASSERT_EQ(latest->noise.size(), 2u);
  EXPECT_DOUBLE_EQ(latest->noise[1].grad_var, 1.1);
  EXPECT_DOUBLE_EQ(latest->last_noise.base_batch, 64);
  EXPECT_EQ(latest->models["throughput"]["schema"], "cloudtune.throughput_model/2");
  EXPECT_FALSE(latest->recorded_at.empty());
  EXPECT_FALSE(h->Latest("2-zz"));
  EXPECT_FALSE(h->Get(999));
  // Reopened: the same rows.
  h.reset();
  h = History::Open(path, {}, &error);
  ASSERT_TRUE(h) << error;
  EXPECT_EQ(h->List().size(), 3u);
  EXPECT_EQ(h->Get(a)->job_id, "first");
}

TEST(History, TwoProcessesWritingAtOnceLoseNothing) {
  const std::string path = TempDb("concurrent.sqlite");
  {
    std::string error;
    ASSERT_TRUE(History::Open(path, {}, &error)) << error;
  }
  constexpr int kPerProcess = 40;
  std::vector<pid_t> kids;
  for (int p = 0; p < 2; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::string error;
      auto h = History::Open(path, {}, &error);
      int ok = 0;
      for (int i = 0; h && i < kPerProcess; ++i)
        ok += h->Record(Job("1-p" + std::to_string(p), "job", 5), &error) > 0;
      ::_exit(ok == kPerProcess ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string error;
  auto h = History::Open(path, {}, &error);
  ASSERT_TRUE(h) << error;
  const auto all = h->List();
  EXPECT_EQ(all.size(), 2u * kPerProcess);
  std::map<std::string, int> per;
  for (const auto& j : all) {
    ++per[j.signature];
    EXPECT_EQ(h->Get(j.id)->configurations.size(), 5u) << "job " << j.id << " lost rows";
  }
  EXPECT_EQ(per["1-p0"], kPerProcess);
  EXPECT_EQ(per["1-p1"], kPerProcess);
}

// A job looking up its model (the tuner's worker, before a refit) never waits for another job
// that is writing its record: an existing database is only read, and WAL readers do not block.
TEST(History, LookUpDoesNotWaitForAWriter) {
  const std::string path = TempDb("busy.sqlite");
  std::string error;
  {
    auto h = History::Open(path, {}, &error);
    ASSERT_TRUE(h) << error;
    ASSERT_GT(h->Record(Job("1-a", "old", 2), &error), 0) << error;
  }
  sqlite3* writer = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &writer), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(writer, "BEGIN IMMEDIATE; INSERT INTO meta VALUES('x', 'y');", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  HistoryOptions quick;
  quick.busy_timeout_seconds = 5;
  const auto t0 = std::chrono::steady_clock::now();
  auto h = History::Open(path, quick, &error);
  ASSERT_TRUE(h) << error;
  const auto found = h->Latest("1-a");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sqlite3_exec(writer, "ROLLBACK;", nullptr, nullptr, nullptr);
  sqlite3_close(writer);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->configurations.size(), 2u);
  EXPECT_LT(took, 1.0);
}

TEST(History, CorruptOrForeignFilesAreRefusedByPath) {
  std::string error;
  const std::string garbage = TempDb("garbage.sqlite");
  std::ofstream(garbage) << std::string(4096, 'x');
  EXPECT_FALSE(History::Open(garbage, {}, &error));
  EXPECT_EQ(error.rfind(garbage + ": ", 0), 0u) << error;
  EXPECT_NE(error.find("not a cloudtune history database"), std::string::npos) << error;

  const std::string foreign = TempDb("foreign.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE songs(title TEXT)", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_FALSE(History::Open(foreign, {}, &error));
  EXPECT_NE(error.find("no schema in table meta"), std::string::npos) << error;

  const std::string newer = TempDb("newer.sqlite");
  { ASSERT_TRUE(History::Open(newer, {}, &error)) << error; }
  ASSERT_EQ(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "UPDATE meta SET value = 'cloudtune.history/9' WHERE key = 'schema'", nullptr,
               nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_FALSE(History::Open(newer, {}, &error));
  EXPECT_NE(error.find("'cloudtune.history/9' is not cloudtune.history/1"), std::string::npos)
      << error;

  // Cut in the middle (a disk that filled up): refused, never a crash.
  const std::string cut = TempDb("cut.sqlite");
  {
    auto h = History::Open(cut, {}, &error);
    ASSERT_TRUE(h) << error;
    for (int i = 0; i < 50; ++i) h->Record(Job("1-a", "j", 20), &error);
  }
  ASSERT_EQ(sqlite3_open(cut.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  fs::remove(cut + "-wal");
  auto h = History::Open(cut, {}, &error);
  if (h) {
    // SQLite may still open a truncated file; reading it must not crash either.
    (void)h->List();
    (void)h->Latest("1-a");
  } else {
    EXPECT_EQ(error.rfind(cut + ": ", 0), 0u) << error;
  }
}

TEST(History, WarmSnapshotPutsThePriorUnderTheJobsOwnMeasurements) {
  WarmPrior prior = MakeWarmPrior(Job("1-a", "old", 3));  // replicas 1, 2, 3 at batch 32
  core::Snapshot live;
  core::Measurement own;
  own.key = {1, 2, 32, 0, "g4dn.12xlarge"};
  own.step_time = 0.5;
  own.sync_time = 0.1;
  own.rows = 10;
  live.profile = {own};
  live.progress = 7;
  const core::Snapshot s = WarmSnapshot(live, prior);
  ASSERT_EQ(s.profile.size(), 3u);
  int replaced = 0;
  for (const auto& m : s.profile)
    if (m.key.num_replicas == 2) replaced += m.step_time == 0.5;
  EXPECT_EQ(replaced, 1);      // the job's own measurement, not the prior's 0.11
  EXPECT_TRUE(s.noise_valid);  // the prior's noise until the job has its own
  EXPECT_DOUBLE_EQ(s.noise.grad_var, 1.1);
  EXPECT_DOUBLE_EQ(s.progress, 7);
  EXPECT_EQ(s.noise_history.size(), 2u);
  live.noise = {2.0, 3.0, 32, false};
  live.noise_valid = true;
  EXPECT_DOUBLE_EQ(WarmSnapshot(live, prior).noise.grad_sqr, 2.0);  // own noise wins
}

// A job of the cifar10 model on 1 x g4dn.12xlarge (4 T4, local batch 32), run for `intervals`
// measurement intervals of 50 steps: each interval it runs what the runtime's previous decision
// proposed (its true step time from the recorded trace of every configuration), and the runtime
// decides again on what the job measured (over `prior`'s measurements when warm).
struct JobRun {
  std::vector<std::string> proposals;  // per interval
  core::Snapshot last;                 // what the job measured
};
JobRun RunJob(const WarmPrior* prior, int intervals) {
  std::map<core::ConfigKey, core::Measurement> truth;
  for (const auto& m : estimator::ReadTraces({kData + "g4dn_cifar10_configs.csv"}))
    truth[m.key] = m;
  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.target_progress = 20000;
  rs.options.candidates = kData + "g4dn_cifar10_configs.csv";
  // What is tested is the warm start: without the batch-growth bound the cold job explores the
  // traced batches for longer, and the warm one need not.
  rs.options.max_batch_growth = 0;
  rs.log = [](const std::string&) {};
  Runtime rt(rs);
  JobRun run;
  core::Snapshot& s = run.last;
  s.current = {1, 4, 32, 0, "g4dn.12xlarge"};
  s.gpus_per_node = 4;
  s.noise = {0.02, 0.6, 128, false};
  s.noise_valid = true;
  for (int interval = 1; interval <= intervals; ++interval) {
    const auto it = truth.find(s.current);
    if (it == truth.end()) break;  // not a traced configuration (cannot happen: the candidates)
    bool have = false;
    for (const auto& m : s.profile) have |= m.key == s.current;
    if (!have) s.profile.push_back(it->second);
    s.step = 50 * interval;
    const TunerResult r =
        prior ? rt.Decide(WarmSnapshot(s, *prior), "timer") : rt.Decide(s, "timer");
    run.proposals.push_back(r.recommendation["proposed"].value("description", ""));
    s.current = r.decision.proposed.config.Key();
  }
  return run;
}

// The first interval from which the proposal no longer changes (1-based).
int SettledAt(const std::vector<std::string>& p) {
  int i = static_cast<int>(p.size());
  while (i > 1 && p[i - 2] == p.back()) --i;
  return i;
}

// Cold: a first job of the model explores from scratch. It is recorded in the history; a second
// job of the same model (same signature) warm-starts from it and settles on the same proposal in
// fewer measurement intervals.
TEST(History, WarmStartSettlesEarlierThanCold) {
  constexpr int kIntervals = 8;
  const JobRun cold = RunJob(nullptr, kIntervals);
  ASSERT_EQ(cold.proposals.size(), static_cast<size_t>(kIntervals));
  std::string error;
  auto h = History::Open(TempDb("warm.sqlite"), {}, &error);
  ASSERT_TRUE(h) << error;
  HistoryJob j;
  j.job_id = "first";
  j.signature = MakeSignature({{512, 784}, {512}, {10, 512}, {10}}).ToString();
  j.configurations = cold.last.profile;
  j.last_noise = cold.last.noise;
  ASSERT_GT(h->Record(j, &error), 0) << error;
  const auto found = h->Latest(j.signature);
  ASSERT_TRUE(found);
  const WarmPrior prior = MakeWarmPrior(*found);
  const JobRun warm = RunJob(&prior, kIntervals);
  ASSERT_EQ(warm.proposals.size(), static_cast<size_t>(kIntervals));
  const int c = SettledAt(cold.proposals), w = SettledAt(warm.proposals);
  std::printf(
      "cold job: %zu configuration(s) measured; settled on \"%s\" at interval %d (%d steps)\n",
      cold.last.profile.size(), cold.proposals.back().c_str(), c, 50 * c);
  std::printf("warm job: settled on \"%s\" at interval %d (%d steps): %d steps earlier\n",
              warm.proposals.back().c_str(), w, 50 * w, 50 * (c - w));
  EXPECT_EQ(warm.proposals.back(), cold.proposals.back());
  EXPECT_LT(w, c);
  EXPECT_LE(w, 2);
}

}  // namespace
}  // namespace cloudtune::runtime
