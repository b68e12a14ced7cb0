// Fault injection: the Fashion-MNIST example with 2 real worker processes (RANK/WORLD_SIZE/MASTER_*
// set as a launcher sets them, Gloo over 127.0.0.1) and the plugin on, where one rank -- rank 0,
// then rank 1 -- meets a fault: an unwritable sidecar, profile or state file, a corrupt state file,
// an HTTP port already in use, a metadata endpoint that hangs or answers garbage, a full disk
// (RLIMIT_FSIZE), NaN gradients for some steps. In every case training finishes, its loss matches a
// run with the plugin off (same seed), and the faulty rank's log says what happened in one line.
// SIGTERM mid-run: rank 0 writes its `end` record; killing rank 1 leaves rank 0's sidecar whole.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "e2e_util.h"
#include "tests/fake_http.h"

namespace {

namespace fs = std::filesystem;
using cloudtune::e2e::CountLines;
using cloudtune::e2e::FreePort;
using cloudtune::e2e::Slurp;
const std::string kBin = CLOUDTUNE_BIN_DIR "/train_fashion_mnist";

struct Fault {
  std::map<std::string, std::string> env = {};  // the faulty rank's CLOUDTUNE_* overrides
  std::vector<std::string> args = {};           // extra example flags (both ranks and the baseline)
  rlim_t max_file_bytes = 0;  // > 0: RLIMIT_FSIZE of the faulty rank (SIGXFSZ off)
};

struct Ranks {
  int status[2] = {-1, -1};  // exit status (128 + signal when killed)
  std::string log[2];
};

const std::vector<std::string> kArgs = {"--steps",      "60",  "--batch", "32", "--log-every", "20",
                                        "--test-limit", "500", "--seed",  "3"};

// Runs rank 0 and rank 1 in `dir`; `on`: CLOUDTUNE=1 (outputs in dir); the faulty rank gets
// `fault`. `term_rank` >= 0: that rank gets SIGTERM once the sidecar has a few records.
Ranks RunRanks(const fs::path& dir, bool on, int faulty, const Fault& fault, int term_rank = -1) {
  const int port = FreePort();
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = ::fork();
    if (pids[rank] == 0) {
      for (const char* v :
           {"CLOUDTUNE", "CLOUDTUNE_SIDECAR", "CLOUDTUNE_PROFILE", "CLOUDTUNE_STATE",
            "CLOUDTUNE_HTTP", "CLOUDTUNE_INSTANCE_TYPE", "CLOUDTUNE_METADATA_URL"})
        ::unsetenv(v);
      ::setenv("CLOUDTUNE_HISTORY", "off", 1);  // no warm start from another case's job
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("LOCAL_WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      if (on) {
        ::setenv("CLOUDTUNE", "1", 1);
        ::setenv("CLOUDTUNE_SIDECAR", (dir / "s.jsonl").c_str(), 1);
        ::setenv("CLOUDTUNE_PROFILE", (dir / "p.csv").c_str(), 1);
        ::setenv("CLOUDTUNE_STATE", (dir / "state.json").c_str(), 1);
        ::setenv("CLOUDTUNE_MEASURE_EVERY", "5", 1);
        ::setenv("CLOUDTUNE_REFIT_SECONDS", "1", 1);
        ::setenv("CLOUDTUNE_INSTANCE_TYPE", "g4dn.12xlarge", 1);
        if (rank == faulty) {
          for (const auto& [k, v] : fault.env) ::setenv(k.c_str(), v.c_str(), 1);
          if (fault.max_file_bytes > 0) {
            ::signal(SIGXFSZ, SIG_IGN);  // a full disk fails writes (EFBIG); it kills nobody
            rlimit r{fault.max_file_bytes, fault.max_file_bytes};
            ::setrlimit(RLIMIT_FSIZE, &r);
          }
        }
      }
      // One open file description for stdout and stderr: their lines interleave, none is lost.
      const std::string out = (dir / ("rank" + std::to_string(rank) + ".log")).string();
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
      if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) std::_Exit(126);
      std::vector<std::string> args{kBin};
      args.insert(args.end(), kArgs.begin(), kArgs.end());
      args.insert(args.end(), fault.args.begin(), fault.args.end());
      if (term_rank >= 0) {  // long enough to be stopped mid-run
        args[2] = "100000";
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(kBin.c_str(), argv.data());
      std::_Exit(127);
    }
  }
  if (term_rank >= 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (std::chrono::steady_clock::now() < until &&
           CountLines(Slurp(dir / "s.jsonl"), "\"kind\":\"measurement\"") < 3)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(pids[term_rank], SIGTERM);
  }
  Ranks r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  for (int rank = 0; rank < 2; ++rank) {
    int st = 0;
    while (::waitpid(pids[rank], &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pids[0], SIGKILL);
        ::kill(pids[1], SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    r.status[rank] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.log[rank] = Slurp(dir / ("rank" + std::to_string(rank) + ".log"));
  }
  return r;
}

// The loss of the last progress line ("... step 60  loss 1.0198 ..."), NaN when there is none.
double FinalLoss(const std::string& log) {
  static const std::regex re("step 60  loss ([0-9.]+)");
  std::smatch m;
  return std::regex_search(log, m, re) ? std::stod(m[1]) : NAN;
}

// The plugin-off loss for these example flags (cached: every case compares with it).
double Baseline(const std::vector<std::string>& args) {
  static std::map<std::vector<std::string>, double> cache;
  auto it = cache.find(args);
  if (it != cache.end()) return it->second;
  const fs::path dir =
      cloudtune::e2e::TempDir("cloudtune-fault", "baseline" + std::to_string(cache.size()));
  Fault f;
  f.args = args;
  const Ranks r = RunRanks(dir, /*on=*/false, -1, f);
  EXPECT_EQ(r.status[0], 0) << r.log[0];
  EXPECT_EQ(r.log[0].find("cloudtune:"), std::string::npos) << r.log[0];
  return cache[args] = FinalLoss(r.log[0]);
}

struct Case {
  std::string name;
  std::function<Fault(const fs::path& dir)> make;
  // What the faulty rank's log says, once (empty: the rank never meets the fault, e.g. rank 1
  // writes no sidecar; the run must still match).
  std::string said[2];
};

class FaultMatrix : public ::testing::TestWithParam<std::tuple<int, int>> {};

std::vector<Case>& Cases() {
  static auto* hang = new cloudtune::test::FakeHttpServer([](const cloudtune::test::FakeRequest&) {
    cloudtune::test::FakeAnswer a;
    a.no_answer = true;
    return a;
  });
  static auto* garbage =
      new cloudtune::test::FakeHttpServer([](const cloudtune::test::FakeRequest&) {
        cloudtune::test::FakeAnswer a;
        a.status = 200;
        a.body = "\x01\x02 <<not metadata>>";
        return a;
      });
  static int held = -1;
  static const int busy = FreePort(&held);
  static std::vector<Case> cases = {
      {"unwritable_sidecar",
       [](const fs::path&) {
         return Fault{{{"CLOUDTUNE_SIDECAR", "/nonexistent/d/s.jsonl"}}};
       },
       {"/nonexistent/d/s.jsonl", ""}},
      {"unwritable_profile",
       [](const fs::path&) {
         return Fault{{{"CLOUDTUNE_PROFILE", "/nonexistent/d/p.csv"}}};
       },
       {"cannot create /nonexistent/d/p.csv", ""}},
      {"unwritable_state",
       [](const fs::path&) {
         return Fault{{{"CLOUDTUNE_STATE", "/nonexistent/d/state.json"}}};
       },
       {"/nonexistent/d/state.json", ""}},
      {"corrupt_state",
       [](const fs::path& dir) {
         std::ofstream(dir / "bad_state.json") << "{\"schema\":\"cloudtune.state/1\",\"sta";
         return Fault{{{"CLOUDTUNE_STATE", (dir / "bad_state.json").string()}}};
       },
       {"bad_state.json", ""}},
      {"http_port_in_use",
       [](const fs::path&) {
         return Fault{{{"CLOUDTUNE_HTTP", "127.0.0.1:" + std::to_string(busy)}}};
       },
       {"cannot listen on 127.0.0.1:" + std::to_string(busy) + ": Address already in use", ""}},
      {"metadata_hangs",
       [](const fs::path&) {
         return Fault{
             {{"CLOUDTUNE_INSTANCE_TYPE", "local"}, {"CLOUDTUNE_METADATA_URL", hang->url()}}};
       },
       {"prices unknown: no metadata answer from", ""}},
      {"metadata_garbage",
       [](const fs::path&) {
         return Fault{
             {{"CLOUDTUNE_INSTANCE_TYPE", "local"}, {"CLOUDTUNE_METADATA_URL", garbage->url()}}};
       },
       {"that are not an instance type name", ""}},
      {"full_disk",
       [](const fs::path&) {
         Fault f;
         f.max_file_bytes = 6000;  // the sidecar outgrows it after a few records
         return f;
       },
       {"cannot write", ""}},
      {"nan_gradients",
       [](const fs::path&) {
         Fault f;
         f.args = {"--nan-rank", "?", "--nan-steps", "7,8,21"};
         return f;
       },
       {"", ""}},
  };
  return cases;
}

TEST_P(FaultMatrix, TrainingFinishesWithTheSameLossAndOneLine) {
  const auto [index, faulty] = GetParam();
  const Case& c = Cases()[index];
  const fs::path dir =
      cloudtune::e2e::TempDir("cloudtune-fault", c.name + "-rank" + std::to_string(faulty));
  Fault f = c.make(dir);
  for (auto& a : f.args) {
    if (a == "?") a = std::to_string(faulty);
  }
  const double off = Baseline(f.args);
  const auto t0 = std::chrono::steady_clock::now();
  const Ranks r = RunRanks(dir, /*on=*/true, faulty, f);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.status[0], 0) << r.log[0] << r.log[1];
  ASSERT_EQ(r.status[1], 0) << r.log[1];
  const double on = FinalLoss(r.log[0]);
  ASSERT_TRUE(std::isfinite(on) && std::isfinite(off)) << r.log[0];
  EXPECT_NEAR(on, off, 0.01 * off) << "plugin on vs off";
  const std::string& said = c.said[faulty];
  if (!said.empty()) {
    EXPECT_EQ(CountLines(r.log[faulty], said), 1) << r.log[faulty];
  }
  if (c.name == "nan_gradients") {  // the plugin skipped the 3 steps; nothing else to say
    const std::string text = Slurp(dir / "s.jsonl");
    const auto end = text.rfind("{\"schema\"");
    ASSERT_NE(end, std::string::npos);
    const auto rec = nlohmann::json::parse(text.substr(end), nullptr, false);
    ASSERT_FALSE(rec.is_discarded()) << text.substr(end);
    EXPECT_EQ(rec.value("kind", ""), "end");
    EXPECT_EQ(rec.value("skipped_steps", -1), 3) << rec.dump();
  }
  // A report row: case, rank, finished, loss on/off, the faulty rank's log line.
  std::string line;
  if (!said.empty()) {
    std::istringstream in(r.log[faulty]);
    for (std::string l; std::getline(in, l);)
      if (l.find(said) != std::string::npos) line = l;
  }
  std::printf("FAULT %s rank %d: finished, loss on %.4f off %.4f, %.0f s; log: %s\n",
              c.name.c_str(), faulty, on, off, seconds, line.empty() ? "-" : line.c_str());
}

INSTANTIATE_TEST_SUITE_P(Cpp, FaultMatrix,
                         ::testing::Combine(::testing::Range(0, 9), ::testing::Values(0, 1)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& i) {
                           return Cases()[std::get<0>(i.param)].name + "_rank" +
                                  std::to_string(std::get<1>(i.param));
                         });

// SIGTERM of rank 1 mid-run: the job stops (rank 0's next all-reduce fails), and every line rank
// 0 wrote to its sidecar is whole.
TEST(FaultSigterm, NonZeroRankStopsTheJobLeavingCompleteLines) {
  const fs::path dir = cloudtune::e2e::TempDir("cloudtune-fault", "sigterm-rank1");
  const Ranks r = RunRanks(dir, /*on=*/true, -1, Fault{}, /*term_rank=*/1);
  EXPECT_EQ(r.status[1], 128 + SIGTERM) << r.log[1];
  EXPECT_NE(r.status[0], 0) << "rank 0 cannot go on without its peer";
  const std::string text = Slurp(dir / "s.jsonl");
  std::istringstream in(text);
  int records = 0;
  for (std::string l; std::getline(in, l);) {
    EXPECT_FALSE(nlohmann::json::parse(l, nullptr, false).is_discarded()) << l;
    ++records;
  }
  EXPECT_GE(records, 4);
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
