// The three deciders drive one runtime: a recorded profile given to the live job's runtime (its
// background tuner), to `cloudtune recommend`, and to the replay's cloudtune policy gives the same
// recommendation.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_runner.h"
#include "cli/replay/replay.h"
#include "estimator/core/trace.h"
#include "plugin/runtime/fit_and_search.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune {
namespace {

const std::string kData = std::string(CLOUDTUNE_SOURCE_DIR) + "/tests/data/";
const std::string kProfile = kData + "g4dn_cifar10_profile.csv";
const std::string kConfigs = kData + "g4dn_cifar10_configs.csv";
constexpr double kTarget = 20000;

// What the job measured: the profile, its noise, and the configuration it runs (2 x 4 T4, 64).
core::Snapshot Measured() {
  core::Snapshot s;
  s.profile = estimator::ReadTraces({kProfile});
  s.noise.grad_sqr = 0.02;
  s.noise.grad_var = 0.6;
  s.noise.base_batch = 128;
  s.noise_valid = true;
  s.current.instance_type = "g4dn.12xlarge";
  s.current.num_nodes = 2;
  s.current.num_replicas = 8;
  s.current.local_bsz = 64;
  s.gpus_per_node = 4;
  return s;
}

struct Outcome {
  std::string action, proposed;
  double cost = 0, hours = 0;
};

Outcome FromJson(const nlohmann::json& j) {
  return {j.at("action").get<std::string>(), j.at("proposed").at("description").get<std::string>(),
          j.at("proposed").at("cost_usd").get<double>(),
          j.at("proposed").at("hours").get<double>()};
}

// 1. The live job: the runtime a job starts, fed through Observe as the plugin feeds it.
Outcome Live() {
  runtime::RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.target_progress = kTarget;
  rs.options.candidates = kConfigs;
  rs.options.refit_seconds = 0.05;
  rs.log = [](const std::string&) {};
  runtime::Runtime rt(rs);
  rt.Start();
  core::Snapshot s = Measured();
  s.step = 0;  // progress 0, like the other two
  rt.Observe(s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!rt.Latest() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto latest = rt.Latest();
  rt.Stop();
  if (!latest) return {};
  return FromJson(*latest);
}

// 2. `cloudtune recommend` with the same inputs as flags.
Outcome Cli() {
  const auto r = cli_test::RunCli(
      "recommend --profile " + kProfile + " --candidates " + kConfigs +
      " --gns 0.02,0.6,128 --target-progress 20000 --current g4dn.12xlarge:2:4:64 --format json");
  EXPECT_EQ(r.status, 0) << r.err;
  if (r.status != 0) return {};
  return FromJson(nlohmann::json::parse(r.out));
}

// 3. The replay's cloudtune policy: its runtime, set up for a scenario of that job (which must
// outlive it), and what the job has seen.
replay::Scenario ReplayScenario() {
  replay::Scenario sc;
  sc.name = "entry-points";
  sc.catalog = search::DefaultCatalog();
  sc.candidates = runtime::CandidatesFromTrace(kConfigs, "g4dn.12xlarge");
  sc.target_progress = kTarget;
  sc.warning_s = 0;  // the live job here does not watch for revocation notices
  return sc;
}

replay::JobView ReplayJob(const core::Snapshot& s) {
  replay::JobView job;
  job.measured = s.profile;
  job.noise = s.noise;
  job.current.type = "g4dn.12xlarge";
  job.current.nodes = 2;
  job.current.gpus_per_node = 4;
  job.current.local_bsz = 64;
  return job;
}

Outcome Replay() {
  const replay::Scenario sc = ReplayScenario();
  runtime::Runtime rt(replay::CloudtuneSetup(sc));
  return FromJson(replay::CloudtuneDecide(rt, ReplayJob(Measured())).ToJson());
}

TEST(EntryPoints, LiveJobCliAndReplayRecommendTheSame) {
  const Outcome live = Live(), cli = Cli(), rep = Replay();
  ASSERT_FALSE(live.action.empty()) << "the live runtime published no recommendation";
  EXPECT_EQ(live.action, cli.action);
  EXPECT_EQ(live.action, rep.action);
  EXPECT_EQ(live.proposed, cli.proposed);
  EXPECT_EQ(live.proposed, rep.proposed);
  EXPECT_DOUBLE_EQ(live.cost, cli.cost);
  EXPECT_DOUBLE_EQ(live.cost, rep.cost);
  EXPECT_DOUBLE_EQ(live.hours, cli.hours);
  EXPECT_DOUBLE_EQ(live.hours, rep.hours);
  // The candidates restrict the proposal to traced configurations.
  bool traced = false;
  for (search::Config c : runtime::CandidatesFromTrace(kConfigs, "g4dn.12xlarge"))
    for (auto p : {core::Purchase::kOnDemand, core::Purchase::kSpot, core::Purchase::kAnchor}) {
      c.purchase = p;
      traced = traced || c.ToString() == live.proposed;
    }
  EXPECT_TRUE(traced) << live.proposed;
}

// The replay hands the runtime the gradient statistics the job measured along its run, as the
// live runtime keeps them: at two batches or more the efficiency drift is fitted from them, so the
// predicted steps change.
TEST(EntryPoints, TheReplayPassesTheJobsNoiseHistory) {
  const replay::Scenario sc = ReplayScenario();
  runtime::Runtime rt(replay::CloudtuneSetup(sc));
  const core::Snapshot s = Measured();
  replay::JobView job = ReplayJob(s);
  const search::Recommendation plain = replay::CloudtuneDecide(rt, job);
  // The noise scale grew fourfold between two batches the job ran.
  const double sqr = s.noise.grad_sqr, var = s.noise.grad_var;
  for (int i = 0; i < 8; ++i) {
    job.noise_history.push_back({256, 100.0 * i, 0, sqr, var});
    job.noise_history.push_back({512, 100.0 * i + 50, 0, sqr / (1 + 0.4 * i), var});
  }
  const search::Recommendation fitted = replay::CloudtuneDecide(rt, job);
  EXPECT_NE(plain.best.steps, fitted.best.steps);
}

TEST(EntryPoints, OneFitPerRefitAndThePublishedModelIsTheOneThatDecided) {
  runtime::FitAndSearchOptions o;
  o.recommend.target_progress = kTarget;
  o.instance_type = "g4dn.12xlarge";
  const core::Snapshot s = Measured();
  const runtime::TunerResult r = runtime::FitAndSearch(s, {"timer", 1}, o);
  // The model in the record is the search's own fit of the current type.
  ASSERT_EQ(r.decision.throughput_models.count("g4dn.12xlarge"), 1u);
  EXPECT_EQ(r.recommendation["models"]["throughput"],
            r.decision.throughput_models.at("g4dn.12xlarge"));
  // A different fit option changes both (nothing is fitted on the side with other options).
  runtime::FitAndSearchOptions o2 = o;
  o2.throughput.huber_k *= 4;
  const runtime::TunerResult r2 = runtime::FitAndSearch(s, {"timer", 1}, o2);
  EXPECT_NE(r2.recommendation["models"]["throughput"], r.recommendation["models"]["throughput"]);
}

}  // namespace
}  // namespace cloudtune
