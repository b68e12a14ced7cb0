// `cloudtune fit` / `cloudtune predict` end to end: runs the built binary and checks stdout,
// stderr, exit status and the model file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "tests/shared_data.h"

namespace {

using cloudtune::cli_test::Slurp;
using cloudtune::cli_test::TmpDir;
using cloudtune::cli_test::Write;
using Result = cloudtune::cli_test::CliResult;
using cloudtune::cli_test::RunCli;

bool Exists(const std::string& p) { return std::ifstream(p).good(); }

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

const std::string kGavel = std::string(CLOUDTUNE_SOURCE_DIR) + "/data/traces/gavel/";
const std::string kPollux = std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/";

TEST(FitCli, RoundTripOnAShippedTrace) {
  const std::string trace = kGavel + "v100_resnet50.csv", model = TmpDir() + "/rt.json";
  Result f = RunCli("fit " + trace + " -o " + model);
  ASSERT_EQ(f.status, 0) << f.err;
  // The trace's rows carry instance_type v100: one model over its (one) type.
  const auto typed = nlohmann::json::parse(Slurp(model));
  EXPECT_EQ(typed["schema"], "cloudtune.throughput_types/1");
  EXPECT_EQ(typed["reference"], "v100");
  EXPECT_GT(typed["types"]["v100"]["hardware"]["gpu_tflops"].get<double>(), 0);  // catalog V100
  const auto& j = typed["types"]["v100"]["model"];
  EXPECT_EQ(j["schema"], "cloudtune.throughput_model/2");
  EXPECT_TRUE(j["model"].contains("form"));
  EXPECT_EQ(j["fit"]["configurations"], 28);
  for (const auto& p : j["parameters"]) {
    EXPECT_TRUE(p.contains("unit"));
    EXPECT_TRUE(p["identified"].is_boolean());
  }
  Result p = RunCli("predict " + model + " " + trace);
  ASSERT_EQ(p.status, 0) << p.err;
  const auto lines = Lines(p.out);
  ASSERT_EQ(lines.size(), 29u);  // header + one row per configuration
  EXPECT_EQ(lines[0].rfind("num_nodes,num_replicas,local_bsz,accum_steps,predicted_step_time,", 0),
            0u);
  double sum_ape = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f;
    std::stringstream ss(lines[i]);
    for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
    ASSERT_GE(f.size(), 11u);
    const double pred = std::stod(f[4]), meas = std::stod(f[9]), sigma = std::stod(f[8]);
    EXPECT_GT(pred, 0);
    EXPECT_GT(sigma, 0);
    sum_ape += std::abs(pred - meas) / meas;
  }
  EXPECT_LT(sum_ape / 28, 0.10);  // in-sample
}

TEST(FitCli, BothTraceFormatsAndSeveralFiles) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string model = TmpDir() + "/two.json";
  Result f = RunCli("fit " + kPollux + "bert/placements.csv " + kPollux +
                    "bert/scalability.csv -o " + model);
  ASSERT_EQ(f.status, 0) << f.err;
  const auto j = nlohmann::json::parse(Slurp(model));
  EXPECT_EQ(j["fit"]["configurations"], 350);
  Result p = RunCli("predict " + model + " " + kPollux + "bert/scalability.csv");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_EQ(Lines(p.out).size(), 1u + 180u);
}

// Rows of two instance types: one model over both; predict answers each row for its own type and
// echoes it; a type that was neither measured nor is in the catalog is named in the error.
TEST(FitCli, InstanceTypesRoundTrip) {
  std::string train = "num_nodes,num_replicas,local_bsz,step_time,sync_time,instance_type\n";
  std::string test = train;
  for (int r : {1, 2, 4, 8})
    for (int b : {16, 32, 64, 128}) {
      const int nodes = r <= 4 ? 1 : 2;
      const double tc_a = 0.02 + 4e-4 * b, tc_b = 0.02 + 2e-4 * b;  // b: a 2x faster GPU
      const double sync = r == 1 ? 0 : 0.01 * r;
      train += std::to_string(nodes) + "," + std::to_string(r) + "," + std::to_string(b) + "," +
               std::to_string(tc_a + sync) + "," + std::to_string(sync) + ",T4\n";
      (r == 1 && b == 16 ? train : test) += std::to_string(nodes) + "," + std::to_string(r) + "," +
                                            std::to_string(b) + "," + std::to_string(tc_b + sync) +
                                            "," + std::to_string(sync) + ",A10\n";
    }
  const std::string tr = Write("types_train.csv", train), te = Write("types_test.csv", test);
  const std::string model = TmpDir() + "/types.json";
  Result f = RunCli("fit " + tr + " -o " + model);
  ASSERT_EQ(f.status, 0) << f.err;
  const auto j = nlohmann::json::parse(Slurp(model));
  EXPECT_EQ(j["reference"], "T4");
  EXPECT_EQ(j["types"]["A10"]["configurations"], 1);
  Result p = RunCli("predict " + model + " " + te);
  ASSERT_EQ(p.status, 0) << p.err;
  const auto lines = Lines(p.out);
  ASSERT_EQ(lines.size(), 16u);  // header + 15 configurations of A10
  for (size_t i = 1; i < lines.size(); ++i)
    EXPECT_EQ(lines[i].substr(lines[i].rfind(',') + 1), "A10") << lines[i];
  const std::string other = Write("types_other.csv",
                                  "num_nodes,num_replicas,local_bsz,step_time,sync_time,"
                                  "instance_type\n1,1,32,0.1,0,mystery-gpu\n");
  Result e = RunCli("predict " + model + " " + other);
  EXPECT_EQ(e.status, 1);
  EXPECT_EQ(e.err,
            "cloudtune: error: instance type 'mystery-gpu' was not measured and has no catalog "
            "entry (GPU TFLOPS, memory bandwidth or network bandwidth): its throughput cannot be "
            "projected\n");
  // A catalog of one's own names it, on a GPU the built-in specs lack, given by its figures.
  const std::string own = Write("types_catalog.csv",
                                "cloud,region,instance_type,gpu_model,gpus,ondemand_usd_per_hour,"
                                "gpu_fp32_tflops\nonprem,lab,mystery-gpu,Mystery1,1,1,40\n");
  Result c = RunCli("predict " + model + " " + other + " --catalog +" + own);
  ASSERT_EQ(c.status, 0) << c.err;
  ASSERT_EQ(Lines(c.out).size(), 2u);
  EXPECT_NE(Lines(c.out)[1].find("mystery-gpu"), std::string::npos);
  // A catalog type that was not measured is projected (A100: in the embedded catalog).
  const std::string a100 = Write("types_a100.csv",
                                 "num_nodes,num_replicas,local_bsz,step_time,sync_time,"
                                 "instance_type\n1,1,128,0.1,0,A100\n");
  Result q = RunCli("predict " + model + " " + a100);
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_EQ(Lines(q.out).size(), 2u);
}

TEST(FitCli, HelpForEveryCommand) {
  for (const std::string c : {"fit", "predict"}) {
    Result r = RunCli(c + " --help");
    EXPECT_EQ(r.status, 0) << c;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << c << r.out;
  }
}

// Each bad input: exact message on stderr, status 1, and nothing written to -o.
void ExpectFitError(const std::string& trace, const std::string& message) {
  const std::string model = TmpDir() + "/bad.json";
  std::remove(model.c_str());
  Result r = RunCli("fit " + trace + " -o " + model);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: " + message + "\n");
  EXPECT_FALSE(Exists(model));
  EXPECT_FALSE(Exists(model + ".tmp"));
}

TEST(FitCli, BadTraces) {
  const std::string missing = TmpDir() + "/nope.csv";
  ExpectFitError(missing, missing + ": cannot open");
  const std::string nocol =
      Write("nocol.csv", "num_nodes,num_replicas,local_bsz,step_time\n1,1,32,0.5\n");
  ExpectFitError(nocol, nocol + ":1: missing column 'sync_time'");
  const std::string text =
      Write("text.csv", "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,1,32,abc,0.1\n");
  ExpectFitError(text, text + ":2:4: step_time: 'abc' is not a finite number");
  const std::string neg =
      Write("neg.csv", "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,2,32,0.5,-0.1\n");
  ExpectFitError(neg, neg + ":2:5: sync_time: -0.1 is negative");
  const std::string empty = Write("empty.csv", "");
  ExpectFitError(empty, empty + ":1: empty file (no header)");
  const std::string sync =
      Write("sync.csv", "placement,local_bsz,step_time,sync_time\n12,32,0.5,0.7\n");
  ExpectFitError(sync, sync +
                           ":2:4: sync_time: configuration (num_nodes=2, num_replicas=3, "
                           "local_bsz=32, accum_steps=0) has mean sync_time 0.7 >= step_time 0.5");
}

TEST(FitCli, BadModels) {
  const std::string trace = kGavel + "v100_resnet50.csv";
  const std::string missing = TmpDir() + "/none.json";
  Result r = RunCli("predict " + missing + " " + trace);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: " + missing + ": cannot open\n");
  const std::string broken = Write("broken.json", "{\"schema\": ");
  r = RunCli("predict " + broken + " " + trace);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("cloudtune: error: " + broken + ": not valid JSON (", 0), 0u) << r.err;
  const std::string foreign = Write("foreign.json", "{\"schema\": \"cloudtune.other/1\"}");
  r = RunCli("predict " + foreign + " " + trace);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: " + foreign +
                       ": schema is \"cloudtune.other/1\", expected "
                       "\"cloudtune.throughput_model/2\"\n");
  EXPECT_TRUE(r.out.empty());
}

TEST(FitCli, PredictRejectsBadTraceToo) {
  const std::string model = TmpDir() + "/ok.json";
  ASSERT_EQ(RunCli("fit " + kGavel + "v100_resnet50.csv -o " + model).status, 0);
  const std::string nocol = Write("nocol2.csv", "placement,local_bsz,step_time\n1,32,0.5\n");
  Result r = RunCli("predict " + model + " " + nocol);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: " + nocol + ":1: missing column 'sync_time'\n");
  EXPECT_TRUE(r.out.empty());
}

TEST(FitCli, BadOptionsNameTheOption) {
  const std::string model = TmpDir() + "/badopt.json";
  Result r = RunCli("fit " + kGavel + "v100_resnet50.csv -o " + model + " --growth-sigma=-0.5");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: fit: growth_sigma must be >= 0\n");
  EXPECT_FALSE(Exists(model));
  // 0 turns the growth term off and is written to the model.
  ASSERT_EQ(RunCli("fit " + kGavel + "v100_resnet50.csv -o " + model + " --growth-sigma 0").status,
            0);
  std::ifstream in(model);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("types").at("v100").at("model").at("model").at("growth_sigma").get<double>(), 0.0);
  // The leave-one-out check: on by default (Gavel's V100 placements out of order widen it), off
  // with --no-loo-widening, and written to the model either way.
  auto loo_scale = [&](const std::string& flags) {
    const Result fit = RunCli("fit " + kGavel + "v100_resnet50.csv -o " + model + flags);
    EXPECT_EQ(fit.status, 0);
    // The summary says so when the check widened the stated variance.
    EXPECT_EQ(fit.err.find("leave-one-out errors x") != std::string::npos, flags.empty())
        << fit.err;
    std::ifstream f(model);
    return nlohmann::json::parse(f)
        .at("types")
        .at("v100")
        .at("model")
        .at("model")
        .at("loo_variance_scale")
        .get<double>();
  };
  EXPECT_GT(loo_scale(""), 1.0);
  EXPECT_EQ(loo_scale(" --no-loo-widening"), 1.0);
  // The bytes a step all-reduces: named when negative, written to the model when given.
  r = RunCli("fit " + kGavel + "v100_resnet50.csv -o " + model + " --gradient-bytes=-1");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: fit: gradient_bytes must be >= 0\n");
  ASSERT_EQ(
      RunCli("fit " + kGavel + "v100_resnet50.csv -o " + model + " --gradient-bytes 102228128")
          .status,
      0);
  EXPECT_EQ(nlohmann::json::parse(Slurp(model)).at("projection").at("gradient_bytes"), 102228128.0);
}

TEST(FitCli, MissingArgumentsAreUsageErrors) {
  Result r = RunCli("fit " + kGavel + "v100_resnet50.csv");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--output is required"), std::string::npos) << r.err;
}

}  // namespace
