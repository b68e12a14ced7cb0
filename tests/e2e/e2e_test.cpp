// End-to-end: the Fashion-MNIST example with 2 real worker processes and the plugin on/off.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "e2e_util.h"
#include "estimator/core/trace.h"

namespace {

namespace fs = std::filesystem;
const std::string kBin = CLOUDTUNE_BIN_DIR "/train_fashion_mnist";
// Short runs: a few hundred small steps.
const std::string kArgs = " --steps 80 --epochs 1 --batch 32 --log-every 40 --test-limit 500";

fs::path TempDir(const std::string& name) { return cloudtune::e2e::TempDir("cloudtune-e2e", name); }
using cloudtune::e2e::CountLines;
using cloudtune::e2e::Slurp;

// Runs the example in `dir` with `env` (VAR=value ...; CLOUDTUNE* of the caller removed);
// returns the exit status, output in *log.
int RunExample(const fs::path& dir, const std::string& env, std::string* log,
               const std::string& extra = "") {
  std::string unset;
  for (const char* v : {"CLOUDTUNE", "CLOUDTUNE_SIDECAR", "CLOUDTUNE_PROFILE",
                        "CLOUDTUNE_MEASURE_EVERY", "RANK", "WORLD_SIZE", "MASTER_PORT"})
    unset += std::string(" -u ") + v;
  const std::string cmd = "cd '" + dir.string() + "' && env" + unset + " " + env + " '" + kBin +
                          "' --workers 2" + kArgs + extra + " > out.log 2>&1";
  const int rc = std::system(cmd.c_str());
  *log = Slurp(dir / "out.log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Every complete (newline-terminated) line must parse; returns them.
std::vector<nlohmann::json> CompleteRecords(const fs::path& path) {
  const std::string text = Slurp(path);
  std::vector<nlohmann::json> out;
  size_t pos = 0, nl;
  while ((nl = text.find('\n', pos)) != std::string::npos) {
    const std::string line = text.substr(pos, nl - pos);
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "line does not parse: " << line << " (" << e.what() << ")";
    }
    pos = nl + 1;
  }
  return out;
}

TEST(E2E, PluginOnWritesSidecarAndProfile) {
  auto dir = TempDir("on");
  std::string log;
  ASSERT_EQ(RunExample(dir, "CLOUDTUNE=1 CLOUDTUNE_MEASURE_EVERY=10", &log), 0) << log;
  auto recs = CompleteRecords(dir / "cloudtune.sidecar.jsonl");
  ASSERT_GE(recs.size(), 3u) << log;
  EXPECT_EQ(recs.front()["kind"], "start");
  EXPECT_EQ(recs.front()["world_size"], 2);
  EXPECT_EQ(recs.back()["kind"], "end");
  int measurements = 0;
  double noise = NAN;
  for (const auto& r : recs) {
    EXPECT_EQ(r["schema"], "cloudtune.sidecar/1");
    if (r["kind"] != "measurement") continue;
    ++measurements;
    EXPECT_FALSE(r["biased"].get<bool>());  // 2 replicas: the unbiased estimator
    EXPECT_EQ(r["config"]["num_replicas"], 2);
    EXPECT_GT(r["samples_per_second"].get<double>(), 0);
    EXPECT_GT(r["sync_time"]["mean"].get<double>(), 0);
    if (r["noise_scale"].is_number()) noise = r["noise_scale"].get<double>();
  }
  EXPECT_GE(measurements, 5);
  EXPECT_TRUE(std::isfinite(noise));
  EXPECT_GT(noise, 0);
  auto rows = cloudtune::estimator::ReadTraces({(dir / "cloudtune.profile.csv").string()});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key.num_replicas, 2);
  EXPECT_EQ(rows[0].key.local_bsz, 32);
  EXPECT_GT(rows[0].step_time, rows[0].sync_time);
  EXPECT_GT(rows[0].sync_time, 0);
}

// --workers serves the job's store itself from the start (no port is picked, closed and then
// bound again); a MASTER_PORT that another process holds is named, and nothing is spawned.
TEST(E2E, LauncherNamesABusyMasterPort) {
  auto dir = TempDir("busy-port");
  int held = -1;
  const int port = cloudtune::e2e::FreePort(&held);
  ASSERT_GE(held, 0);
  std::string log;
  EXPECT_NE(RunExample(dir, "MASTER_PORT=" + std::to_string(port), &log), 0) << log;
  ::close(held);
  EXPECT_EQ(CountLines(log, "cannot serve the job's store on port " + std::to_string(port)), 1)
      << log;
  EXPECT_EQ(CountLines(log, "train_fashion_mnist: 2 worker(s)"), 0) << log;
}

// Unequal local batches (48 and 80, as a mixed cluster balances them): the workers train, the
// gradients combined weighted by samples; the sidecar records the global batch (2 x 64) and an
// unbiased noise scale from the unequal-batch estimator.
TEST(E2E, UnequalLocalBatchesTrainAndWriteASidecar) {
  auto dir = TempDir("unequal");
  std::string log;
  ASSERT_EQ(RunExample(dir, "CLOUDTUNE=1 CLOUDTUNE_MEASURE_EVERY=10", &log, " --batches 48,80"), 0)
      << log;
  EXPECT_NE(log.find("test accuracy"), std::string::npos) << log;
  auto recs = CompleteRecords(dir / "cloudtune.sidecar.jsonl");
  int measurements = 0;
  double noise = NAN;
  for (const auto& r : recs) {
    if (r["kind"] != "measurement") continue;
    ++measurements;
    EXPECT_EQ(r["config"]["num_replicas"], 2);
    EXPECT_EQ(r["config"]["global_batch"], 128);
    EXPECT_FALSE(r["biased"].get<bool>());
    if (r["noise_scale"].is_number()) noise = r["noise_scale"].get<double>();
  }
  EXPECT_GE(measurements, 5);
  EXPECT_TRUE(std::isfinite(noise));
  EXPECT_GT(noise, 0);
  // A list that does not match the workers is refused by name.
  auto bad = TempDir("unequal-bad");
  EXPECT_NE(RunExample(bad, "", &log, " --batches 48,80,96"), 0);
  EXPECT_NE(log.find("--batches: 3 local batches for 2 workers"), std::string::npos) << log;
}

TEST(E2E, PluginOffWritesNothing) {
  auto dir = TempDir("off");
  std::string log;
  ASSERT_EQ(RunExample(dir, "CLOUDTUNE_SIDECAR=side.jsonl", &log), 0) << log;
  EXPECT_FALSE(fs::exists(dir / "side.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "cloudtune.sidecar.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "cloudtune.profile.csv"));
  EXPECT_EQ(CountLines(log, "cloudtune:"), 0) << log;
}

// Rank 0 cannot write its sidecar: every rank switches off together (one line each), so no rank
// adds the noise-scale element to the all-reduce alone, and training goes on.
TEST(E2E, SidecarInMissingDirectoryLogsOnceAndTrainingGoesOn) {
  auto dir = TempDir("missing");
  std::string log;
  ASSERT_EQ(RunExample(dir, "CLOUDTUNE=1 CLOUDTUNE_SIDECAR=no/such/dir/s.jsonl", &log), 0) << log;
  EXPECT_EQ(CountLines(log, "cloudtune:"), 2) << log;  // one line per rank
  EXPECT_EQ(CountLines(log, "no/such/dir/s.jsonl"), 1) << log;
  EXPECT_EQ(CountLines(log, "on every rank"), 2) << log;
  EXPECT_NE(log.find("test accuracy"), std::string::npos) << log;
}

TEST(E2E, InvalidSettingLogsOnceAndTrainingGoesOn) {
  auto dir = TempDir("invalid");
  std::string log;
  ASSERT_EQ(RunExample(dir, "CLOUDTUNE=1 CLOUDTUNE_MEASURE_EVERY=often", &log), 0) << log;
  EXPECT_EQ(CountLines(log, "cloudtune:"), 1) << log;
  EXPECT_EQ(CountLines(log, "CLOUDTUNE_MEASURE_EVERY='often'"), 1) << log;
  EXPECT_FALSE(fs::exists(dir / "cloudtune.sidecar.jsonl"));
  EXPECT_NE(log.find("test accuracy"), std::string::npos) << log;
}

// Starts the example's two ranks as separate processes (with RANK/WORLD_SIZE/MASTER_* set, as a
// launcher would) writing the sidecar `sidecar`; returns their pids once the sidecar has `lines`
// lines (or 90 s passed; *lines_seen says how many).
std::vector<pid_t> StartRanks(const fs::path& dir, const std::string& sidecar, size_t lines,
                              size_t* lines_seen) {
  const int port = cloudtune::e2e::FreePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("CLOUDTUNE", "1", 1);
      ::setenv("CLOUDTUNE_SIDECAR", sidecar.c_str(), 1);
      ::setenv("CLOUDTUNE_PROFILE", (dir / "p.csv").c_str(), 1);
      ::setenv("CLOUDTUNE_MEASURE_EVERY", "2", 1);
      const std::string out = (dir / ("rank" + std::to_string(rank) + ".log")).string();
      std::freopen(out.c_str(), "w", stdout);
      std::freopen(out.c_str(), "a", stderr);
      ::execl(kBin.c_str(), kBin.c_str(), "--steps", "100000", "--batch", "16", "--log-every",
              "1000", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  *lines_seen = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = Slurp(sidecar);
    *lines_seen = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
    if (*lines_seen >= lines) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pids;
}

TEST(E2E, KilledWorkerLeavesOnlyCompleteLines) {
  auto dir = TempDir("kill");
  const std::string sidecar = (dir / "s.jsonl").string();
  size_t lines = 0;
  // Wait for a few measurement records, then kill rank 0 (the writer) mid-run.
  const std::vector<pid_t> pids = StartRanks(dir, sidecar, 6, &lines);
  ::kill(pids[0], SIGKILL);
  ::kill(pids[1], SIGKILL);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  ASSERT_GE(lines, 6u) << Slurp(dir / "rank0.log");
  auto recs = CompleteRecords(sidecar);
  ASSERT_GE(recs.size(), 6u);
  EXPECT_EQ(recs.front()["kind"], "start");
  for (size_t i = 1; i < recs.size(); ++i)  // the tuner's first recommendations come early
    EXPECT_TRUE(recs[i]["kind"] == "measurement" || recs[i]["kind"] == "recommendation")
        << recs[i].dump();
}

// SIGTERM (how torchrun and launchers stop workers): rank 0 writes its "end" record, marked with
// the signal, flushes, and dies of the signal as it would have.
TEST(E2E, SigtermWritesTheEndRecord) {
  auto dir = TempDir("term");
  const std::string sidecar = (dir / "s.jsonl").string();
  size_t lines = 0;
  const std::vector<pid_t> pids = StartRanks(dir, sidecar, 6, &lines);
  ::kill(pids[0], SIGTERM);
  int status = 0;
  ::waitpid(pids[0], &status, 0);
  ::kill(pids[1], SIGKILL);
  ::waitpid(pids[1], nullptr, 0);
  ASSERT_GE(lines, 6u) << Slurp(dir / "rank0.log");
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  auto recs = CompleteRecords(sidecar);
  ASSERT_GE(recs.size(), 2u);
  EXPECT_EQ(recs.back()["kind"], "end") << recs.back().dump();
  EXPECT_EQ(recs.back()["signal"], "SIGTERM");
  EXPECT_GT(recs.back()["steps"].get<long long>(), 0);
}

}  // namespace
