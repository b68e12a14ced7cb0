// `cloudtune steps` end to end: runs the built binary and checks stdout, stderr and exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_runner.h"
#include "tests/shared_data.h"

namespace {

using cloudtune::cli_test::Slurp;
using cloudtune::cli_test::TmpDir;
using cloudtune::cli_test::Write;
using Result = cloudtune::cli_test::CliResult;

Result RunSteps(const std::string& args) { return cloudtune::cli_test::RunCli("steps " + args); }

const std::string kDir = std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/cifar10/";
const std::string kObs =
    "--observed 128=" + kDir + "validation-128.csv --observed 256=" + kDir + "validation-256.csv";

TEST(StepsCli, PredictsWithUncertaintyAndDrift) {
  // The run at 2048 reached progress 39070.56 in 3178 steps.
  Result r = RunSteps(kObs + " --batch 2048 --progress 39070.563330320554");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto j = nlohmann::json::parse(r.out);
  const double it = j.at("iterations").get<double>();
  EXPECT_LT(std::abs(it - 3178) / 3178, 0.15) << it;  // the target: max 15 %
  EXPECT_GT(j.at("log_sigma").get<double>(), 0);
  EXPECT_LT(j.at("iterations_low").get<double>(), it);
  EXPECT_GT(j.at("iterations_high").get<double>(), it);
  EXPECT_GT(j.at("iterations_plain_theory").get<double>(), 1.3 * it);
  EXPECT_EQ(j.at("base_batch").get<double>(), 128);
  EXPECT_EQ(j.at("single_batch").get<bool>(), false);
  EXPECT_EQ(j.at("drift").at("model").at("schema"), "cloudtune.efficiency_model/1");
  EXPECT_GT(j.at("drift").at("gain_at_batch").get<double>(), 1);
}

// The uncertainty grows with the ratio to the largest observed batch (256), and --growth-sigma
// scales that growth: 0 leaves only the fit's own terms.
TEST(StepsCli, UncertaintyGrowsWithTheRatioToTheLargestObservedBatch) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  auto sigma = [](const std::string& args) {
    Result r = RunSteps(kObs + " --progress 20000 " + args);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.status == 0 ? nlohmann::json::parse(r.out).at("log_sigma").get<double>() : 0.0;
  };
  double last = 0;
  for (int b : {256, 512, 1024, 2048, 4096}) {
    const double s = sigma("--batch " + std::to_string(b));
    EXPECT_GT(s, last) << b;
    last = s;
  }
  EXPECT_LT(sigma("--batch 4096 --growth-sigma 0"), 0.5 * last);
  EXPECT_GT(sigma("--batch 4096 --growth-sigma 0.58"), 1.5 * last);
  Result bad = RunSteps(kObs + " --progress 20000 --batch 512 --growth-sigma -1");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("--growth-sigma: growth_sigma must be >= 0"), std::string::npos)
      << bad.err;
}

TEST(StepsCli, SingleObservedBatchIsThePlainTheoryAndFlagged) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Result r = RunSteps("--observed 128=" + kDir + "validation-128.csv --batch 512 --progress 39000");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("single_batch").get<bool>(), true);
  EXPECT_NEAR(j.at("iterations").get<double>(), j.at("iterations_plain_theory").get<double>(), 1);
}

TEST(StepsCli, BaseBatchIsTheBatchTheTracesReferTo) {
  // The run at 256 reached progress 39062.9 (counted in steps at 128) in 20,377 steps. Observed
  // alone, its progress column is read in steps at 256 unless --base-batch says otherwise.
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string obs = "--observed 256=" + kDir + "validation-256.csv --batch 256";
  Result as_b0 = RunSteps(obs + " --progress 39062.9");
  Result named = RunSteps(obs + " --progress 39062.9 --base-batch 128");
  ASSERT_EQ(as_b0.status, 0) << as_b0.err;
  ASSERT_EQ(named.status, 0) << named.err;
  auto a = nlohmann::json::parse(as_b0.out), n = nlohmann::json::parse(named.out);
  EXPECT_NEAR(a.at("iterations").get<double>(), 39063, 1);  // one B0-step a step
  EXPECT_EQ(n.at("base_batch").get<double>(), 128);
  EXPECT_NEAR(n.at("iterations").get<double>(), 20377, 0.02 * 20377);
  Result bad = RunSteps(obs + " --progress 100 --base-batch -1");
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(bad.err,
            "cloudtune: error: --base-batch: must be a number >= 0 (0 = the smallest observed "
            "batch)\n");
}

TEST(StepsCli, WritesTheModel) {
  const std::string m = TmpDir() + "/model.json";
  Result r = RunSteps(kObs + " --batch 1024 --progress 1000 -o " + m);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(Slurp(m));
  EXPECT_EQ(j.at("schema"), "cloudtune.efficiency_model/1");
}

TEST(StepsCli, BadInputNamesFileLineOrArgument) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  auto expect_error = [](const std::string& args, const std::string& message) {
    Result r = RunSteps(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(r.err, "cloudtune: error: " + message + "\n") << args;
  };
  expect_error("--observed 128=/nonexistent/v.csv --batch 512 --progress 10",
               "/nonexistent/v.csv: cannot open");
  const std::string nocol = Write("nocol.csv", "progress,iteration,metric,grad_sqr\n1,1,1,1\n");
  expect_error("--observed 128=" + nocol + " --batch 512 --progress 1",
               nocol + ":1: missing column 'grad_var'");
  const std::string badnum =
      Write("badnum.csv", "progress,iteration,metric,grad_sqr,grad_var\n1,1,1,1,1\n2,2,1,x,1\n");
  expect_error("--observed 128=" + badnum + " --batch 512 --progress 1",
               badnum + ":3:4: grad_sqr: 'x' is not a finite number");
  expect_error(kObs + " --batch 0 --progress 100", "--batch: 0 must be positive");
  expect_error(kObs + " --batch -64 --progress 100", "--batch: -64 must be positive");
  expect_error(kObs + " --batch big --progress 100", "--batch: 'big' is not a number");
  expect_error(kObs + " --batch 512 --progress 0", "--progress: 0 must be positive");
  expect_error("--observed 0=" + kDir + "validation-128.csv --batch 512 --progress 100",
               "--observed '0=" + kDir + "validation-128.csv': batch: 0 must be positive");
  expect_error(
      "--observed " + kDir + "validation-128.csv --batch 512 --progress 100",
      "--observed: '" + kDir + "validation-128.csv' is not B=FILE (batch size '=' validation CSV)");
  expect_error(kObs + " --batch 512 --progress 50000",
               "--progress: 50000 is beyond the observed progress (at most 39063, in " + kDir +
                   "validation-128.csv; --extrapolate allows 2% more)");
}

}  // namespace
