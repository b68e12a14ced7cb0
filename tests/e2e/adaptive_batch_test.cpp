// End-to-end: the Fashion-MNIST example's --adaptive-batch loop with 2 real worker processes:
// it completes, logs a decision (switch or keep with its reason) every --adapt-every steps, adopts
// a switch on every rank, writes a validation trace that `cloudtune steps` can read, and stops at
// --target-accuracy.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "e2e_util.h"
#include "estimator/efficiency.h"

namespace {

namespace fs = std::filesystem;
const std::string kBin = CLOUDTUNE_BIN_DIR "/train_fashion_mnist";

fs::path TempDir(const std::string& name) { return cloudtune::e2e::TempDir("cloudtune-ab", name); }
using cloudtune::e2e::Slurp;

// Runs the example with 2 workers in `dir`; returns the exit status, output in *log.
int RunExample(const fs::path& dir, const std::string& env, const std::string& args,
               std::string* log) {
  std::string unset;
  for (const char* v : {"CLOUDTUNE", "CLOUDTUNE_SIDECAR", "CLOUDTUNE_PROFILE",
                        "CLOUDTUNE_MAX_LOCAL_BATCH", "RANK", "WORLD_SIZE", "MASTER_PORT"})
    unset += std::string(" -u ") + v;
  // No job history: every run starts from what it measures itself.
  const std::string cmd =
      "cd '" + dir.string() + "' && env" + unset + " CLOUDTUNE_HISTORY=off " + env + " '" + kBin +
      "' --workers 2 --epochs 1 --log-every 1000 --test-limit 300 " + args + " > out.log 2>&1";
  const int rc = std::system(cmd.c_str());
  *log = Slurp(dir / "out.log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<std::string> Lines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

// A decision is logged every --adapt-every steps, each a switch or a keep with its reason; the
// validation trace has one row per evaluation and parses as `cloudtune steps` input.
TEST(AdaptiveBatch, LogsEveryDecisionAndWritesValidationTrace) {
  const fs::path dir = TempDir("decisions");
  std::string log;
  ASSERT_EQ(RunExample(dir, "",
                       "--batch 16 --steps 60 --adaptive-batch --adapt-every 10 --eval-every 30 "
                       "--validation-csv val.csv",
                       &log),
            0)
      << log;
  const auto decisions = Lines(log, "adaptive-batch: step ");
  ASSERT_EQ(decisions.size(), 6u) << log;
  const std::regex kind(
      "adaptive-batch: step \\d+ (switch local \\d+ x \\d+ -> \\d+ x \\d+|keep "
      "local \\d+ x \\d+.*: .+)");
  for (const auto& d : decisions) EXPECT_TRUE(std::regex_search(d, kind)) << d;
  ASSERT_EQ(Lines(log, "summary: steps 60,").size(), 1u) << log;

  double max_progress = 0;
  const auto obs =
      cloudtune::estimator::ReadValidationTrace((dir / "val.csv").string(), 32, &max_progress);
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_EQ(obs[1].iteration, 60);
  // Progress is in steps at B0 = 32 (the initial batch): at least one per step.
  EXPECT_GE(max_progress, 60 - 1e-9);
  EXPECT_GT(obs[1].grad_sqr, 0);
  EXPECT_GT(obs[1].grad_var, 0);
}

// A local batch over CLOUDTUNE_MAX_LOCAL_BATCH cannot run: once the tuner has its first record of
// the configuration, its recommendation gives a batch for this hardware under the cap, the loop
// takes it up, and all ranks adopt it (the run completes; a rank that did not would deadlock or
// fail the all-reduce).
TEST(AdaptiveBatch, SwitchesBelowTheMemoryCapOnEveryRank) {
  const fs::path dir = TempDir("cap");
  std::string log;
  ASSERT_EQ(
      RunExample(dir, "CLOUDTUNE_MAX_LOCAL_BATCH=16 CLOUDTUNE_MEASURE_EVERY=5",
                 "--batch 32 --steps 300 --adaptive-batch --adapt-every 10 --max-accum 4", &log),
      0)
      << log;
  const auto switches = Lines(log, " switch local 32 x 1 -> ");
  ASSERT_EQ(switches.size(), 1u) << log;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(switches[0], m, std::regex("-> (\\d+) x (\\d+) \\(global 64 -> (\\d+)\\)")))
      << switches[0];
  const int local = std::stoi(m[1]), micro = std::stoi(m[2]), global = std::stoi(m[3]);
  EXPECT_LE(local, 16);
  EXPECT_LE(micro, 4);
  EXPECT_EQ(global, 2 * local * micro);
  // The summary reports the adopted configuration (the last one taken up).
  EXPECT_EQ(Lines(log, "), switches ").size(), 1u) << log;
  EXPECT_TRUE(Lines(log, "local 32 x 1), switches ").empty()) << log;
}

// --target-accuracy stops the run at the first evaluation that reaches it.
TEST(AdaptiveBatch, StopsAtTargetAccuracy) {
  const fs::path dir = TempDir("target");
  std::string log;
  ASSERT_EQ(
      RunExample(dir, "", "--batch 32 --steps 400 --eval-every 10 --target-accuracy 0.5", &log), 0)
      << log;
  const auto reached = Lines(log, "target accuracy 0.5000 reached at step ");
  ASSERT_EQ(reached.size(), 1u) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(reached[0], m, std::regex("at step (\\d+)")));
  const int step = std::stoi(m[1]);
  EXPECT_LT(step, 400);
  EXPECT_EQ(step % 10, 0);
}

TEST(AdaptiveBatch, RejectsAnUnknownLrRule) {
  const fs::path dir = TempDir("bad");
  std::string log;
  EXPECT_EQ(RunExample(dir, "", "--steps 5 --adaptive-batch --lr-scaling cubic", &log), 2);
  EXPECT_NE(log.find("--lr-scaling 'cubic'"), std::string::npos) << log;
}

}  // namespace
