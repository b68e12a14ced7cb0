// End-to-end: the online tuner inside the Fashion-MNIST example (2 real worker processes, Gloo on
// 127.0.0.1): recommendation records consistent with `cloudtune recommend`, the HTTP endpoint while
// training runs, saved state across runs, a fake metadata server's revocation notice, a corrupt
// state file and an unreachable metadata URL.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "e2e_util.h"
#include "estimator/core/trace.h"
#include "tests/fake_http.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kBin = CLOUDTUNE_BIN_DIR "/train_fashion_mnist";
const std::string kCli = CLOUDTUNE_BIN_DIR "/cloudtune";
const double kTarget = 20000;
// Settings every run shares: frequent measurements and refits, a catalog instance type.
const std::string kEnv =
    "CLOUDTUNE=1 CLOUDTUNE_MEASURE_EVERY=10 CLOUDTUNE_REFIT_SECONDS=1 "
    "CLOUDTUNE_INSTANCE_TYPE=g4dn.12xlarge CLOUDTUNE_TARGET_PROGRESS=20000";

fs::path TempDir(const std::string& name) {
  return cloudtune::e2e::TempDir("cloudtune-online", name);
}
using cloudtune::e2e::CountLines;
using cloudtune::e2e::Slurp;

using cloudtune::e2e::FreePort;

// Runs the example (2 workers) in `dir` with `env`; returns the exit status, output in *log.
int RunExample(const fs::path& dir, const std::string& env, int steps, std::string* log,
               const std::string& args = "") {
  std::string unset;
  for (const char* v :
       {"CLOUDTUNE", "CLOUDTUNE_SIDECAR", "CLOUDTUNE_PROFILE", "CLOUDTUNE_MEASURE_EVERY",
        "CLOUDTUNE_STATE", "CLOUDTUNE_HTTP", "CLOUDTUNE_PREEMPTION_URL", "CLOUDTUNE_CATALOG",
        "TORCHELASTIC_RESTART_COUNT", "RANK", "WORLD_SIZE", "MASTER_PORT"})
    unset += std::string(" -u ") + v;
  const std::string cmd = "cd '" + dir.string() + "' && env" + unset + " " + env + " '" + kBin +
                          "' --workers 2 --epochs 1 --batch 32 --log-every 1000 --test-limit 200" +
                          " --steps " + std::to_string(steps) + " " + args + " > out.log 2>&1";
  const int rc = std::system(cmd.c_str());
  *log = Slurp(dir / "out.log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<json> Records(const fs::path& path, const std::string& kind) {
  std::istringstream in(Slurp(path));
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (j["kind"] == kind) out.push_back(std::move(j));
  }
  return out;
}

// GET http://127.0.0.1:port/target; returns the status (0 = no answer), body in *body.
int HttpGet(int port, const std::string& target, std::string* body) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return 0;
  }
  const std::string req =
      "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ::send(fd, req.data(), req.size(), 0);
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  int status = 0;
  if (std::sscanf(resp.c_str(), "HTTP/1.1 %d", &status) != 1) return 0;
  const size_t split = resp.find("\r\n\r\n");
  *body = split == std::string::npos ? "" : resp.substr(split + 4);
  return status;
}

// `cloudtune recommend` on what a recommendation record says it was computed from: its inputs and
// the efficiency model it decided with (which the job grows from its own noise history).
json CliRecommend(const json& rec, const fs::path& dir) {
  const json& in = rec["inputs"];
  const fs::path csv = dir / "record_profile.csv";
  std::ofstream(csv) << in["profile_csv"].get<std::string>();
  const fs::path gns = dir / "record_efficiency.json";
  std::ofstream(gns) << rec["models"]["efficiency"].dump();
  const json& c = in["current"];
  char cur[256], prog[64];
  std::snprintf(cur, sizeof cur, "%s:%d:%d:%d:%d", c["instance_type"].get<std::string>().c_str(),
                c["num_nodes"].get<int>(), c["gpus_per_node"].get<int>(), c["local_bsz"].get<int>(),
                c["accum_steps"].get<int>());
  std::snprintf(prog, sizeof prog, "%.17g", in["progress"].get<double>());
  char bytes[64];
  std::snprintf(bytes, sizeof bytes, "%.17g", in["gradient_bytes"].get<double>());
  const std::string out = (dir / "cli.json").string();
  fs::remove(out);
  const std::string cmd = "'" + kCli + "' recommend --profile '" + csv.string() + "' --gns '" +
                          gns.string() + "' --current " + cur + " --target-progress " +
                          std::to_string(kTarget) + " --progress " + prog + " --gradient-bytes " +
                          bytes + " --format json -o '" + out + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return json::parse(Slurp(out));
}

void ExpectSameRecommendation(const json& rec, const fs::path& dir) {
  ASSERT_TRUE(rec.contains("inputs")) << rec.dump();
  ASSERT_EQ(rec["inputs"]["noise_history_batches"].size(), 1u);
  const json cli = CliRecommend(rec, dir);
  EXPECT_EQ(rec["action"], cli["action"]);
  EXPECT_EQ(rec["proposed"]["description"], cli["proposed"]["description"]);
  for (const char* k : {"cost_usd", "hours", "throughput"}) {
    const double a = rec["proposed"][k].get<double>(), b = cli["proposed"][k].get<double>();
    EXPECT_NEAR(a, b, 1e-6 * std::abs(b)) << k;
  }
  EXPECT_NEAR(rec["current"]["cost_usd"].get<double>(), cli["current"]["cost_usd"].get<double>(),
              1e-6 * cli["current"]["cost_usd"].get<double>());
}

TEST(Online, RecommendationsMatchCliAndHttpAnswersWhileTraining) {
  auto dir = TempDir("rec");
  const int port = FreePort();
  std::string log;
  auto job = std::async(std::launch::async, [&] {
    return RunExample(
        dir,
        kEnv + " CLOUDTUNE_HTTP=127.0.0.1:" + std::to_string(port) + " CLOUDTUNE_STATE=state.json",
        400, &log);
  });
  // Poll the endpoint while the job runs until both answer.
  bool metrics_ok = false, rec_ok = false;
  std::string metrics, recommendation;
  while (job.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready &&
         !(metrics_ok && rec_ok)) {
    std::string body;
    if (!metrics_ok && HttpGet(port, "/metrics", &body) == 200 &&
        body.find("cloudtune_step_time_seconds") != std::string::npos) {
      metrics_ok = true;
      metrics = body;
    }
    if (!rec_ok && HttpGet(port, "/v1/recommendation", &body) == 200) {
      rec_ok = json::parse(body).contains("proposed");
      recommendation = body;
    }
  }
  ASSERT_EQ(job.get(), 0) << log;
  EXPECT_TRUE(metrics_ok) << log;
  EXPECT_TRUE(rec_ok) << log;
  EXPECT_NE(metrics.find("# TYPE cloudtune_refits_total"), std::string::npos) << metrics;

  const auto recs = Records(dir / "cloudtune.sidecar.jsonl", "recommendation");
  ASSERT_GE(recs.size(), 1u) << log;
  EXPECT_EQ(CountLines(log, "cloudtune: switch") + CountLines(log, "cloudtune: keep") +
                CountLines(log, "cloudtune: measure"),
            static_cast<int>(recs.size()))
      << log;
  for (const auto& r : recs) {
    EXPECT_EQ(r["target_progress"], kTarget);
    EXPECT_GT(r["inputs"]["progress"].get<double>(), 0);
    // What a step all-reduces: the example model's 206,922 FP32 gradients.
    EXPECT_EQ(r["inputs"]["gradient_bytes"].get<double>(), 4.0 * 206922);
    ExpectSameRecommendation(r, dir);
  }
  // The state was saved (write-then-rename: no temporary left behind).
  const json state = json::parse(Slurp(dir / "state.json"));
  EXPECT_EQ(state["schema"], "cloudtune.state/1");
  EXPECT_EQ(state["state"]["profile"].size(), 1u);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("state.json."), std::string::npos) << e.path();

  // ---- a second run with the same state restores it ----
  const double saved_progress = state["state"]["progress"].get<double>();
  ASSERT_GT(saved_progress, 0);
  fs::rename(dir / "cloudtune.sidecar.jsonl", dir / "first.sidecar.jsonl");
  std::string log2;
  ASSERT_EQ(RunExample(dir, kEnv + " CLOUDTUNE_STATE=state.json", 60, &log2), 0) << log2;
  EXPECT_EQ(CountLines(log2, "cloudtune: restored state from state.json"), 1) << log2;
  const auto recs2 = Records(dir / "cloudtune.sidecar.jsonl", "recommendation");
  ASSERT_GE(recs2.size(), 1u) << log2;
  const json& first = recs2.front();
  EXPECT_EQ(first["trigger"], "restored");
  EXPECT_TRUE(first["inputs"]["restored"].get<bool>());
  EXPECT_DOUBLE_EQ(first["inputs"]["progress"].get<double>(), saved_progress);
  // Its profile is the earlier run's measurements.
  std::istringstream csv(first["inputs"]["profile_csv"].get<std::string>());
  const auto rows = cloudtune::estimator::ParseTrace(csv, "record");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].step_time, state["state"]["profile"][0]["step_time"].get<double>());
  EXPECT_DOUBLE_EQ(rows[0].sync_time, state["state"]["profile"][0]["sync_time"].get<double>());
  ExpectSameRecommendation(first, dir);
  // Later records continue the progress and merge the new measurements into the old rows.
  const json& last = recs2.back();
  if (recs2.size() > 1) {
    EXPECT_GT(last["inputs"]["progress"].get<double>(), saved_progress);
  }
  const json state2 = json::parse(Slurp(dir / "state.json"));
  EXPECT_GT(state2["state"]["progress"].get<double>(), saved_progress);
  EXPECT_GT(state2["state"]["profile"][0]["rows"].get<int>(),
            state["state"]["profile"][0]["rows"].get<int>());
}

// A fake instance metadata endpoint (AWS protocol): 404 until Notice(), then 200 + the notice.
class FakeMetadata {
 public:
  FakeMetadata()
      : server_([this](const cloudtune::test::FakeRequest&) {
          if (!notice_) return cloudtune::test::FakeAnswer{404, ""};
          return cloudtune::test::FakeAnswer{
              200, R"({"action":"terminate","time":"2026-11-21T23:59:00Z"})"};
        }) {}
  int port() const { return server_.port(); }
  void Notice() { notice_ = true; }
  int requests() const { return server_.requests(); }

 private:
  std::atomic<bool> notice_{false};
  cloudtune::test::FakeHttpServer server_;  // last: stops before notice_ goes
};

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(Online, PreemptionNoticeWritesRecordAndRaisesFlagWithinTwoPolls) {
  auto dir = TempDir("preempt");
  FakeMetadata meta;
  const double poll = 0.5;
  const int port = FreePort();
  std::string log;
  auto job = std::async(std::launch::async, [&] {
    return RunExample(dir,
                      kEnv + " CLOUDTUNE_PREEMPTION_POLL_SECONDS=0.5 CLOUDTUNE_HTTP=127.0.0.1:" +
                          std::to_string(port) + " CLOUDTUNE_PREEMPTION_URL=http://127.0.0.1:" +
                          std::to_string(meta.port()) + "/latest/meta-data/spot/instance-action",
                      600, &log);
  });
  // Wait until training runs, the watcher has polled (404 = no notice) and the tuner has published
  // its first recommendation (so that it has the data to plan for the remaining fleet; on a loaded
  // machine the watchers' first polls come well before that), then issue the notice.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string body;
  while (std::chrono::steady_clock::now() < until &&
         job.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (meta.requests() >= 4 && HttpGet(port, "/metrics", &body) == 200 &&
        body.find("cloudtune_preemption_notice 0") != std::string::npos &&
        body.find("\ncloudtune_recommendations_total ") != std::string::npos &&
        body.find("\ncloudtune_recommendations_total 0\n") == std::string::npos)
      break;
  }
  ASSERT_NE(job.wait_for(std::chrono::seconds(0)), std::future_status::ready) << "job too short";
  const double notice_at = UnixNow();
  meta.Notice();
  // The flag (what should_checkpoint() returns) shows in /metrics.
  bool flag = false;
  double flag_at = 0;
  while (!flag && job.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    flag = HttpGet(port, "/metrics", &body) == 200 &&
           body.find("cloudtune_preemption_notice 1") != std::string::npos;
    flag_at = UnixNow();
  }
  ASSERT_EQ(job.get(), 0) << log;
  EXPECT_TRUE(flag) << log;
  EXPECT_LE(flag_at - notice_at, 2 * poll + 0.5);
  const auto recs = Records(dir / "cloudtune.sidecar.jsonl", "preemption");
  ASSERT_EQ(recs.size(), 1u) << log;
  EXPECT_EQ(recs[0]["action"], "terminate");
  EXPECT_EQ(recs[0]["provider"], "aws");
  EXPECT_EQ(recs[0]["notice_time"], "2026-11-21T23:59:00Z");
  EXPECT_LE(recs[0]["time"].get<double>() - notice_at, 2 * poll) << recs[0].dump();
  EXPECT_EQ(CountLines(log, "notice from aws"), 1) << log;
  // Both ranks poll their own metadata; a recommendation for the remaining fleet follows.
  bool preempted = false;
  for (const auto& r : Records(dir / "cloudtune.sidecar.jsonl", "recommendation")) {
    if (r["trigger"] == "preemption") {
      preempted = true;
      EXPECT_TRUE(r["preempted"].get<bool>());
      EXPECT_GE(r["time"].get<double>(), recs[0]["time"].get<double>());
    }
  }
  EXPECT_TRUE(preempted) << log;
}

TEST(Online, CorruptStateIsReportedOnceAndIgnored) {
  auto dir = TempDir("corrupt");
  std::ofstream(dir / "state.json") << "{\"schema\":\"cloudtune.state/1\",\"state\":{garbage";
  std::string log;
  ASSERT_EQ(
      RunExample(dir, kEnv + " CLOUDTUNE_STATE=state.json CLOUDTUNE_STRAGGLER_EVERY=10", 150, &log),
      0)
      << log;
  EXPECT_EQ(CountLines(log, "cloudtune: ignoring saved state: "), 1) << log;
  // The straggler gathers ran beside the state's saves; whether one of two processes sharing two
  // cores with other tests was really slower is not this test's to judge (false positives among
  // equal workers: Straggler.NoiseAloneIsNotAStraggler; a slowed rank:
  // Online.SlowedWorkerIsReportedAsStraggler).
  EXPECT_EQ(CountLines(log, "state.json"), 1) << log;
  EXPECT_NE(log.find("test accuracy"), std::string::npos) << log;
  const auto recs = Records(dir / "cloudtune.sidecar.jsonl", "recommendation");
  ASSERT_GE(recs.size(), 1u) << log;
  EXPECT_FALSE(recs.front()["inputs"]["restored"].get<bool>());
  // Replaced by a valid state at the end.
  EXPECT_EQ(json::parse(Slurp(dir / "state.json"))["schema"], "cloudtune.state/1");
}

TEST(Online, UnreachableMetadataUrlIsLoggedOnceAndTrainingCompletes) {
  auto dir = TempDir("unreachable");
  const int port = FreePort();  // nothing listens there
  std::string log;
  ASSERT_EQ(RunExample(dir,
                       kEnv +
                           " CLOUDTUNE_PREEMPTION_POLL_SECONDS=0.2 "
                           "CLOUDTUNE_PREEMPTION_URL=http://127.0.0.1:" +
                           std::to_string(port) + "/latest/meta-data/spot/instance-action",
                       150, &log),
            0)
      << log;
  EXPECT_NE(log.find("test accuracy"), std::string::npos) << log;
  EXPECT_LE(CountLines(log, std::to_string(port)), 1) << log;
  EXPECT_TRUE(Records(dir / "cloudtune.sidecar.jsonl", "preemption").empty());
}

TEST(Online, SlowedWorkerIsReportedAsStraggler) {
  auto dir = TempDir("straggler");
  std::string log;
  ASSERT_EQ(RunExample(dir, kEnv + " CLOUDTUNE_STRAGGLER_EVERY=10", 200, &log,
                       "--slow-rank 1 --slow-ms 25"),
            0)
      << log;
  const auto recs = Records(dir / "cloudtune.sidecar.jsonl", "straggler");
  ASSERT_EQ(recs.size(), 1u) << log;
  EXPECT_EQ(recs[0]["rank"], 1);
  EXPECT_GT(recs[0]["ratio"].get<double>(), 1.15);
  EXPECT_GT(recs[0]["factor"].get<double>(), 1.0);
  EXPECT_EQ(CountLines(log, "cloudtune: straggler: rank 1"), 1) << log;
  // A recommendation accounts for it. (Its step is the snapshot it was computed from, which may
  // precede the straggler record's step when the detection arrived while the tuner was working.)
  bool accounted = false;
  for (const auto& r : Records(dir / "cloudtune.sidecar.jsonl", "recommendation"))
    accounted =
        accounted || (r["straggler_factor"].get<double>() > 1 &&
                      r["reason"].get<std::string>().find("straggler") != std::string::npos);
  EXPECT_TRUE(accounted) << log;
}

}  // namespace
