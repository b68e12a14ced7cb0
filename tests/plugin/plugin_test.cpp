#include "plugin/torch/plugin.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cloudtune/cloudtune.h"
#include "estimator/core/trace.h"

namespace cloudtune::plugin {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  auto dir =
      fs::temp_directory_path() / ("cloudtune-plugin-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

runtime::Options OnOptions(const fs::path& dir) {
  runtime::Options o;
  o.enabled = true;
  o.sidecar = (dir / "s.jsonl").string();
  o.profile = (dir / "p.csv").string();
  o.measure_every = 10;
  o.warmup_steps = 2;
  o.gns_max_window = 20;
  o.log_level = "error";
  return o;
}

// The plugin's own records (the tuner's recommendations, which come as soon as there is data,
// are left out: tests/runtime covers them).
std::vector<nlohmann::json> Records(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] != "recommendation") out.push_back(std::move(j));
  }
  return out;
}

// One single-replica step whose gradient is mean + noise.
void Step(Plugin& p, const at::Tensor& mean, double noise, bool nan = false) {
  p.StepBegin();
  at::Tensor g = mean + noise * at::randn(mean.sizes());
  if (nan) g[0] = NAN;
  const double slot = p.GradsLocal({g});
  p.SyncBegin();
  p.SyncEnd();
  p.GradsReduced({g}, slot);
  p.StepEnd(32, 1);
}

TEST(Plugin, OffWritesNothingAndReturnsAtOnce) {
  auto dir = TempDir("off");
  runtime::Options o = OnOptions(dir);
  o.enabled = false;
  Plugin p(o);
  EXPECT_FALSE(p.Start({0, 1, 0, 32, 1}));
  Step(p, at::ones({100}), 0.1);
  p.Finish();
  EXPECT_EQ(p.step(), 0);
  EXPECT_FALSE(fs::exists(dir / "s.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "p.csv"));
}

TEST(Plugin, SingleReplicaRecordsMeasurementsProfileAndBiasedNoise) {
  at::manual_seed(0);
  auto dir = TempDir("single");
  Plugin p(OnOptions(dir));
  ASSERT_TRUE(p.Start({0, 1, 0, 32, 1}));
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  p.SetObserver([&](std::shared_ptr<const Snapshot> s) { snaps.push_back(std::move(s)); });
  const at::Tensor mean = at::full({1000}, 0.05);
  for (int i = 0; i < 30; ++i) Step(p, mean, 0.1);
  p.Finish();
  auto recs = Records(dir / "s.jsonl");
  ASSERT_EQ(recs.size(), 5u);  // start, 3 measurements, end
  EXPECT_EQ(recs.front()["kind"], "start");
  EXPECT_EQ(recs.front()["world_size"], 1);
  EXPECT_EQ(recs.front()["config"]["local_bsz"], 32);
  EXPECT_EQ(recs.back()["kind"], "end");
  EXPECT_EQ(recs.back()["steps"], 30);
  for (int i = 1; i <= 3; ++i) {
    const auto& m = recs[i];
    EXPECT_EQ(m["kind"], "measurement");
    EXPECT_EQ(m["step"], 10 * i);
    EXPECT_TRUE(m["biased"].get<bool>());
    EXPECT_GT(m["step_time"]["mean"].get<double>(), 0);
    EXPECT_GT(m["samples_per_second"].get<double>(), 0);
    EXPECT_TRUE(m["noise_scale"].is_number());
  }
  EXPECT_EQ(recs[1]["timed_steps"], 8);  // 2 warm-up steps left out
  // |G|^2 = 1000 * 0.05^2 = 2.5; per-sample tr(Σ₁) = 32 * 1000 * 0.01 = 320.
  const hooks::GnsState g = p.noise();
  EXPECT_TRUE(g.biased);
  EXPECT_NEAR(g.grad_sqr, 2.5, 0.5);
  EXPECT_NEAR(g.grad_var * g.base_batch, 320, 64);
  // Profile: one configuration, readable by the trace reader.
  auto rows = estimator::ReadTraces({(dir / "p.csv").string()});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key.local_bsz, 32);
  EXPECT_EQ(rows[0].key.instance_type, "local");
  ASSERT_EQ(p.profile().size(), 1u);
  EXPECT_EQ(p.profile()[0].rows, 28);  // steps averaged: 30 less 2 warm-up steps
  EXPECT_NEAR(rows[0].step_time, p.profile()[0].step_time, 1e-12);
  // Observer got one snapshot per interval.
  ASSERT_EQ(snaps.size(), 3u);
  EXPECT_EQ(snaps[0]->step, 10);
  EXPECT_TRUE(snaps[2]->noise_valid);
  EXPECT_EQ(snaps[2]->profile.size(), 1u);
}

// Replicas with different local batches (a mixed cluster balancing its step times) mark the
// tuner's snapshot as a mixed cluster; equal ones, which ReplicaBatches then reports or not at all,
// do not.
TEST(Plugin, UnevenReplicaBatchesMarkAMixedCluster) {
  auto dir = TempDir("mixed");
  Plugin p(OnOptions(dir));
  ASSERT_TRUE(p.Start({0, 1, 0, 32, 1}));
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  p.SetObserver([&](std::shared_ptr<const Snapshot> s) { snaps.push_back(std::move(s)); });
  const at::Tensor mean = at::full({100}, 0.05);
  auto step = [&](double mean_inv_batch, double mean_batch) {
    p.StepBegin();
    at::Tensor g = mean + 0.1 * at::randn(mean.sizes());
    const double slot = p.GradsLocal({g});
    p.SyncBegin();
    p.SyncEnd();
    if (mean_batch > 0) p.ReplicaBatches(mean_inv_batch, mean_batch);
    p.GradsReduced({g}, slot);
    p.StepEnd(32, 1);
  };
  for (int i = 0; i < 10; ++i) step(0, 0);                           // not reported
  for (int i = 0; i < 10; ++i) step((1.0 / 16 + 1.0 / 48) / 2, 32);  // 16 and 48
  for (int i = 0; i < 10; ++i) step(1.0 / 32, 32);                   // 32 and 32
  p.Finish();
  ASSERT_EQ(snaps.size(), 3u);
  EXPECT_FALSE(snaps[0]->mixed_cluster);
  EXPECT_TRUE(snaps[1]->mixed_cluster);
  EXPECT_FALSE(snaps[2]->mixed_cluster);
}

// Slow steps: a record closes once it spans measure_seconds and holds kMinRecordSteps timed steps,
// long before measure_every steps.
TEST(Plugin, SlowStepsCloseARecordByTime) {
  auto dir = TempDir("by-time");
  runtime::Options o = OnOptions(dir);
  o.measure_every = 1000;
  o.measure_seconds = 0.02;  // each step below sleeps 10 ms: the step count binds, not the clock
  Plugin p(o);
  ASSERT_TRUE(p.Start({0, 1, 0, 32, 1}));
  const at::Tensor mean = at::full({100}, 0.05);
  for (int i = 0; i < 30; ++i) {
    p.StepBegin();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    at::Tensor g = mean + 0.1 * at::randn(mean.sizes());
    const double slot = p.GradsLocal({g});
    p.SyncBegin();
    p.SyncEnd();
    p.GradsReduced({g}, slot);
    p.StepEnd(32, 1);
  }
  p.Finish();
  std::vector<int> at_steps;
  for (const auto& r : Records(dir / "s.jsonl"))
    if (r["kind"] == "measurement") at_steps.push_back(r["step"].get<int>());
  // 2 warm-up steps, then a record every kMinRecordSteps timed steps; Finish closes the rest.
  const int k = runtime::kMinRecordSteps;
  const std::vector<int> want = {2 + k, 2 + 2 * k, 2 + 3 * k, 2 + 4 * k, 2 + 5 * k, 30};
  EXPECT_EQ(at_steps, want);

  // measure_seconds = 0: by steps only, however slow.
  auto dir0 = TempDir("by-steps");
  runtime::Options o0 = OnOptions(dir0);
  o0.measure_seconds = 0;
  Plugin p0(o0);
  ASSERT_TRUE(p0.Start({0, 1, 0, 32, 1}));
  for (int i = 0; i < 15; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    Step(p0, mean, 0.1);
  }
  p0.Finish();
  std::vector<int> at_steps0;
  for (const auto& r : Records(dir0 / "s.jsonl"))
    if (r["kind"] == "measurement") at_steps0.push_back(r["step"].get<int>());
  EXPECT_EQ(at_steps0, (std::vector<int>{10, 15}));  // measure_every, then Finish
}

TEST(Plugin, NonFiniteGradientStepIsSkipped) {
  auto dir = TempDir("nan");
  Plugin p(OnOptions(dir));
  ASSERT_TRUE(p.Start({0, 1, 0, 32, 1}));
  const at::Tensor mean = at::full({100}, 0.05);
  for (int i = 0; i < 5; ++i) Step(p, mean, 0.1);
  Step(p, mean, 0.1, /*nan=*/true);
  for (int i = 0; i < 5; ++i) Step(p, mean, 0.1);
  const hooks::GnsState g = p.noise();
  EXPECT_EQ(g.skipped, 1);
  EXPECT_TRUE(std::isfinite(g.grad_sqr));
  EXPECT_TRUE(std::isfinite(g.grad_var));
  EXPECT_EQ(g.steps, 4 + 4);  // pairs (1,2)..(4,5) and (7,8)..(10,11): step 6 is never paired
  p.Finish();
  auto recs = Records(dir / "s.jsonl");
  EXPECT_EQ(recs.back()["skipped_steps"], 1);
}

TEST(Plugin, MultiReplicaSlotGivesUnbiasedEstimate) {
  // Rank 0 of 4 replicas with 2 micro-steps each; the test plays the all-reduce.
  at::manual_seed(1);
  auto dir = TempDir("multi");
  Plugin p(OnOptions(dir));
  ASSERT_TRUE(p.Start({0, 4, 1, 16, 2}));
  const int64_t d = 2000;
  const double sigma = 0.05;  // per-coordinate std of one micro-batch gradient
  const at::Tensor mean = at::full({d}, 0.02);
  for (int step = 0; step < 200; ++step) {
    p.StepBegin();
    at::Tensor sum = at::zeros({d});
    double slot_sum = 0, my_slot = 0;
    for (int r = 0; r < 4; ++r) {
      double slot = 0;
      for (int a = 0; a < 2; ++a) {
        at::Tensor g = mean + sigma * at::randn({d});
        if (r == 0) my_slot = p.GradsLocal({g});
        slot += g.square().sum().item<double>();
        sum += g;
      }
      slot_sum += r == 0 ? my_slot : slot;
    }
    at::Tensor avg = sum / 8;
    p.GradsReduced({avg}, slot_sum / 4);
    p.StepEnd(16, 2);
  }
  const hooks::GnsState g = p.noise();
  EXPECT_FALSE(g.biased);
  EXPECT_EQ(g.base_batch, 4 * 16 * 2);
  const double true_sqr = d * 0.02 * 0.02, true_var1 = 16 * d * sigma * sigma;
  EXPECT_NEAR(g.grad_sqr, true_sqr, 0.1 * true_sqr);
  EXPECT_NEAR(g.grad_var * g.base_batch, true_var1, 0.1 * true_var1);
  p.Finish();
  auto rows = estimator::ReadTraces({(dir / "p.csv").string()});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key.num_replicas, 4);
  EXPECT_EQ(rows[0].key.accum_steps, 1);
}

TEST(Plugin, TensorSlotVariantMatchesScalarOne) {
  // On CPU (or a build without CUDA) the tensor protocol falls back to the scalar one.
  at::manual_seed(3);
  auto a_dir = TempDir("tensor_a"), b_dir = TempDir("tensor_b");
  Plugin a(OnOptions(a_dir)), b(OnOptions(b_dir));
  ASSERT_TRUE(a.Start({0, 2, 1, 8, 1}));
  ASSERT_TRUE(b.Start({0, 2, 1, 8, 1}));
  for (int i = 0; i < 20; ++i) {
    at::Tensor mine = at::randn({50}), other = at::randn({50});
    const double other_sqr = other.square().sum().item<double>();
    at::Tensor avg = (mine + other) / 2;
    a.StepBegin();
    const double slot = a.GradsLocal({mine});
    a.GradsReduced({avg}, (slot + other_sqr) / 2);
    a.StepEnd(8, 1);
    b.StepBegin();
    at::Tensor tslot = b.GradsLocalTensor({mine});
    EXPECT_EQ(tslot.dim(), 0);
    EXPECT_NEAR(tslot.item<double>(), slot, 1e-9);
    b.GradsReducedTensor({avg}, (tslot + other_sqr) / 2);
    b.StepEnd(8, 1);
  }
  EXPECT_EQ(a.noise().steps, 20);
  EXPECT_NEAR(a.noise().grad_sqr, b.noise().grad_sqr, 1e-9);
  EXPECT_NEAR(a.noise().grad_var, b.noise().grad_var, 1e-9);
}

TEST(Plugin, BatchChangeStartsANewConfiguration) {
  auto dir = TempDir("change");
  Plugin p(OnOptions(dir));
  ASSERT_TRUE(p.Start({0, 1, 0, 32, 1}));
  const at::Tensor g = at::ones({10});
  for (int i = 0; i < 25; ++i) {
    p.StepBegin();
    p.GradsReduced({g}, p.GradsLocal({g}));
    p.StepEnd(i < 12 ? 32 : 64, 1);
  }
  p.Finish();
  auto rows = estimator::ReadTraces({(dir / "p.csv").string()});
  ASSERT_EQ(rows.size(), 2u);
  auto prof = p.profile();
  ASSERT_EQ(prof.size(), 2u);
  EXPECT_EQ(prof[0].rows + prof[1].rows, 25 - 2 * 2);  // warm-up after start and after the change
  // Consecutive pairs never mix the two batch sizes: 11 pairs at 32, 12 at 64, none across.
  EXPECT_EQ(p.noise().steps, 11 + 12);
}

TEST(Plugin, UnwritableSidecarSwitchesOff) {
  runtime::Options o = OnOptions(TempDir("bad"));
  o.sidecar = "/nonexistent-cloudtune-dir/s.jsonl";
  Plugin p(o);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(p.Start({0, 1, 0, 32, 1}));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("/nonexistent-cloudtune-dir/s.jsonl"), std::string::npos) << err;
  EXPECT_FALSE(p.enabled());
}

TEST(Plugin, InvalidOptionsSwitchOff) {
  runtime::Options o = OnOptions(TempDir("invalid"));
  o.measure_every = 0;
  Plugin p(o);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(p.Start({0, 1, 0, 32, 1}));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("CLOUDTUNE_MEASURE_EVERY='0'"), std::string::npos) << err;
}

TEST(Plugin, NonLeaderRanksWriteNothing) {
  auto dir = TempDir("rank1");
  Plugin p(OnOptions(dir));
  ASSERT_TRUE(p.Start({1, 2, 0, 32, 1}));
  const at::Tensor g = at::ones({10});
  p.StepBegin();
  EXPECT_DOUBLE_EQ(p.GradsLocal({g}), 10.0);  // but still fills its slot
  p.GradsReduced({g}, 10.0);
  p.StepEnd(32, 1);
  p.Finish();
  EXPECT_FALSE(fs::exists(dir / "s.jsonl"));
}

TEST(TorchOps, RegisteredUnderCloudtuneNamespace) {
  ASSERT_NE(&cloudtune::Init, nullptr);  // keeps the library linked
  for (const char* op : {"init", "enabled", "step_begin", "sync_begin", "sync_end", "grads_local",
                         "grads_reduced", "step_end", "should_checkpoint", "shutdown"}) {
    auto h = c10::Dispatcher::singleton().findSchema({std::string("cloudtune::") + op, ""});
    EXPECT_TRUE(h.has_value()) << op;
  }
  auto enabled =
      c10::Dispatcher::singleton().findSchemaOrThrow("cloudtune::enabled", "").typed<bool()>();
  EXPECT_FALSE(enabled.call());  // not initialised: off
  auto local = c10::Dispatcher::singleton()
                   .findSchemaOrThrow("cloudtune::grads_local", "")
                   .typed<double(std::vector<at::Tensor>)>();
  EXPECT_EQ(local.call({at::ones({4})}), 0.0);  // off: returns at once
}

}  // namespace
}  // namespace cloudtune::plugin
