#include "plugin/runtime/state.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "estimator/core/error.h"

using namespace cloudtune::runtime;
namespace fs = std::filesystem;

namespace {

class StateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cloudtune_state_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "state.json").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static SavedState Sample() {
    SavedState s;
    s.job_id = "job-42";
    s.step = 1234;
    s.progress = 987.5;
    s.current = {2, 8, 64, 1, "g4dn.12xlarge"};
    cloudtune::core::Measurement a;
    a.key = {1, 4, 64, 0, "g4dn.12xlarge"};
    a.step_time = 0.31234567890123;
    a.sync_time = 0.05;
    a.rows = 17;
    a.max_gpus_per_node = 4;
    cloudtune::core::Measurement b = a;
    b.key = {2, 8, 64, 1, "g4dn.12xlarge"};
    b.step_time = 0.7;
    b.sync_time = 0.2;
    s.profile = {a, b};
    s.noise = {0.25, 12.5, 256, true};
    s.gns = {{"ema_sqr", 0.2}, {"ema_var", 11.0}, {"count", 400}};
    s.models = {{"throughput", {{"alpha_c", 0.01}}}};
    s.recommendation = {{"proposed", {{"num_replicas", 16}}}};
    return s;
  }
  std::string Slurp() {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void Spit(const std::string& text) { std::ofstream(path_, std::ios::trunc) << text; }

  fs::path dir_;
  std::string path_;
};

}  // namespace

TEST_F(StateTest, DefaultOptionsAreValid) {
  std::string err;
  EXPECT_TRUE(StateOptions{}.IsValid(&err)) << err;
  StateOptions o;
  o.save_seconds = 0;
  EXPECT_FALSE(o.IsValid(&err));
}

TEST_F(StateTest, RoundTrip) {
  SavedState s = Sample();
  s.spot_exposure["g4dn.12xlarge"] = {12.5, 3};
  s.gradient_bytes = 827688;
  std::string err;
  ASSERT_TRUE(SaveState(path_, s, &err)) << err;
  // Write-then-rename leaves no temporary behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir_)) files += (void(e), 1);
  EXPECT_EQ(files, 1);
  const LoadResult r = LoadState(path_, "job-42");
  ASSERT_EQ(r.status, LoadStatus::kLoaded) << r.message;
  const SavedState& t = *r.state;
  EXPECT_EQ(t.job_id, "job-42");
  EXPECT_EQ(t.step, 1234);
  EXPECT_EQ(t.progress, 987.5);
  EXPECT_TRUE(t.current == s.current);
  ASSERT_EQ(t.profile.size(), 2u);
  EXPECT_TRUE(t.profile[0].key == s.profile[0].key);
  EXPECT_EQ(t.profile[0].step_time, s.profile[0].step_time);  // bit-exact doubles
  EXPECT_EQ(t.profile[0].rows, 17);
  EXPECT_EQ(t.profile[0].max_gpus_per_node, 4);
  EXPECT_EQ(t.noise.grad_sqr, 0.25);
  EXPECT_EQ(t.noise.grad_var, 12.5);
  EXPECT_EQ(t.noise.base_batch, 256);
  EXPECT_TRUE(t.noise.biased);
  EXPECT_EQ(t.gns, s.gns);
  EXPECT_EQ(t.models, s.models);
  EXPECT_EQ(t.recommendation, s.recommendation);
  ASSERT_EQ(t.spot_exposure.count("g4dn.12xlarge"), 1u);
  EXPECT_EQ(t.spot_exposure.at("g4dn.12xlarge").node_hours, 12.5);
  EXPECT_EQ(t.spot_exposure.at("g4dn.12xlarge").revocations, 3);
  EXPECT_EQ(t.gradient_bytes, 827688);
  EXPECT_EQ(RestoreSnapshot(t).gradient_bytes, 827688);
  EXPECT_FALSE(t.saved_at.empty());
  // Any job id accepted when none is expected; overwrite replaces atomically.
  EXPECT_EQ(LoadState(path_, "").status, LoadStatus::kLoaded);
  SavedState s2 = s;
  s2.step = 2000;
  ASSERT_TRUE(SaveState(path_, s2, &err)) << err;
  EXPECT_EQ(LoadState(path_, "job-42").state->step, 2000);
}

TEST_F(StateTest, MissingFileIsAFreshStart) {
  const LoadResult r = LoadState(path_, "job-42");
  EXPECT_EQ(r.status, LoadStatus::kMissing);
  EXPECT_FALSE(r.state);
  EXPECT_EQ(r.message, "");
}

TEST_F(StateTest, CorruptTruncatedForeignAndTamperedFilesAreRejectedWithReason) {
  std::string err;
  ASSERT_TRUE(SaveState(path_, Sample(), &err)) << err;
  const std::string good = Slurp();

  auto expect_rejected = [&](const std::string& text, const std::string& expected_job,
                             const std::string& needle) {
    Spit(text);
    const LoadResult r = LoadState(path_, expected_job);
    EXPECT_EQ(r.status, LoadStatus::kRejected) << needle;
    EXPECT_FALSE(r.state);
    EXPECT_EQ(r.message.rfind(path_ + ":", 0), 0u) << r.message;  // names the file first
    EXPECT_NE(r.message.find(needle), std::string::npos) << r.message;
  };
  expect_rejected("\x7f\x45\x4c\x46 garbage \x01\x02", "job-42", "not valid JSON");
  expect_rejected(good.substr(0, good.size() / 2), "job-42", "truncated");
  expect_rejected("", "job-42", "empty");
  expect_rejected(good, "job-7", "foreign state file: saved by job \"job-42\"");
  expect_rejected("[1,2,3]", "job-42", "not a cloudtune state file");
  expect_rejected(R"({"schema":"other.tool/3","job_id":"job-42"})", "job-42",
                  "foreign state file: schema");
  // A flipped digit inside a number still parses: the checksum catches it.
  std::string tampered = good;
  const auto pos = tampered.find("1234");
  ASSERT_NE(pos, std::string::npos);
  tampered[pos] = '9';
  expect_rejected(tampered, "job-42", "checksum mismatch");
}

TEST_F(StateTest, ImplausiblePayloadIsRejectedByFromJson) {
  nlohmann::json j = Sample().ToJson();
  j["profile"][1]["sync_time"] = 5.0;  // sync >= step
  EXPECT_THROW(SavedState::FromJson(j, "f.json"), cloudtune::InputError);
  try {
    SavedState::FromJson(j, "f.json");
  } catch (const cloudtune::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("f.json: \"profile[1]\""), std::string::npos) << e.what();
  }
  j = Sample().ToJson();
  j["noise"]["grad_var"] = -1;
  EXPECT_THROW(SavedState::FromJson(j, "f.json"), cloudtune::InputError);
  // States written before the spot exposure was kept load without it; a bad one is named.
  j = Sample().ToJson();
  j.erase("spot_exposure");
  EXPECT_TRUE(SavedState::FromJson(j, "f.json").spot_exposure.empty());
  // ... and before the gradient bytes were (0: unknown); a negative count is named.
  j.erase("gradient_bytes");
  EXPECT_EQ(SavedState::FromJson(j, "f.json").gradient_bytes, 0);
  j["gradient_bytes"] = -4;
  try {
    SavedState::FromJson(j, "f.json");
    FAIL();
  } catch (const cloudtune::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"gradient_bytes\" = -4 is out of range (>= 0.0)"),
              std::string::npos)
        << e.what();
  }
  j.erase("gradient_bytes");
  j["spot_exposure"] = {{"g4dn.12xlarge", {{"node_hours", 1.0}, {"revocations", -1}}}};
  try {
    SavedState::FromJson(j, "f.json");
    FAIL();
  } catch (const cloudtune::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("spot_exposure.g4dn.12xlarge.revocations"),
              std::string::npos)
        << e.what();
  }
  j = Sample().ToJson();
  j.erase("progress");
  try {
    SavedState::FromJson(j, "f.json");
    FAIL();
  } catch (const cloudtune::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing \"progress\""), std::string::npos) << e.what();
  }
}

TEST_F(StateTest, SaveFailureIsReportedNotThrown) {
  std::string err;
  EXPECT_FALSE(SaveState((dir_ / "no" / "such" / "dir" / "s.json").string(), Sample(), &err));
  EXPECT_NE(err.find("cannot create"), std::string::npos) << err;
  EXPECT_FALSE(SaveState("", Sample(), &err));
}
