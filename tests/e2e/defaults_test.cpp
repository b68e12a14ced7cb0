// End-to-end: the Fashion-MNIST example with 2 real worker processes and only CLOUDTUNE=1 gets a
// recommendation; a fake metadata server of each cloud's format names the instance and how it is
// bought in the sidecar's start record; a hanging metadata endpoint costs at most the time bound.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "e2e_util.h"
#include "plugin/runtime/cloud.h"
#include "search/catalog.h"
#include "tests/fake_http.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kBin = CLOUDTUNE_BIN_DIR "/train_fashion_mnist";

// On a cloud VM "auto" would ask the link-local metadata service; tests never leave 127.0.0.1.
std::string OffTheCloud() {
  return cloudtune::runtime::CloudFromDmi("/sys/class/dmi/id").empty()
             ? ""
             : " CLOUDTUNE_METADATA_URL=off";
}

int RunExample(const fs::path& dir, const std::string& env, int steps, std::string* log,
               int epochs = 1) {
  std::string unset;
  for (const char* v :
       {"CLOUDTUNE", "CLOUDTUNE_SIDECAR", "CLOUDTUNE_PROFILE", "CLOUDTUNE_MEASURE_EVERY",
        "CLOUDTUNE_INSTANCE_TYPE", "CLOUDTUNE_TARGET_PROGRESS", "CLOUDTUNE_METADATA_URL",
        "CLOUDTUNE_STATE", "CLOUDTUNE_HTTP", "CLOUDTUNE_CLOUDS", "CLOUDTUNE_GPUS",
        "TORCHELASTIC_RESTART_COUNT", "RANK", "WORLD_SIZE", "MASTER_PORT"})
    unset += std::string(" -u ") + v;
  const std::string cmd = "cd '" + dir.string() + "' && env" + unset + " " + env + " '" + kBin +
                          "' --workers 2 --epochs " + std::to_string(epochs) +
                          " --batch 32 --log-every 1000 --test-limit 200" + " --steps " +
                          std::to_string(steps) + " > out.log 2>&1";
  const int rc = std::system(cmd.c_str());
  *log = cloudtune::e2e::Slurp(dir / "out.log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<json> Records(const fs::path& path, const std::string& kind) {
  std::istringstream in(cloudtune::e2e::Slurp(path));
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (kind.empty() || j["kind"] == kind) out.push_back(std::move(j));
  }
  return out;
}

TEST(Defaults, CloudtuneAloneGivesARecommendation) {
  const fs::path dir = cloudtune::e2e::TempDir("cloudtune-defaults", "alone");
  std::string log;
  ASSERT_EQ(RunExample(dir, "CLOUDTUNE=1" + OffTheCloud(), 200, &log), 0) << log;
  const auto all = Records(dir / "cloudtune.sidecar.jsonl", "");
  ASSERT_FALSE(all.empty()) << log;
  EXPECT_EQ(all.front()["kind"], "start");
  EXPECT_FALSE(all.front()["version"].get<std::string>().empty());
  EXPECT_EQ(all.front()["instance"]["instance_type"], "local");
  EXPECT_FALSE(all.front()["instance"]["prices_known"].get<bool>());
  const auto recs = Records(dir / "cloudtune.sidecar.jsonl", "recommendation");
  ASSERT_GE(recs.size(), 1u) << log;
  EXPECT_EQ(recs.front()["target"], "none");
  EXPECT_FALSE(recs.front()["reason"].get<std::string>().empty());
  // One start-up line saying what is known and what would unlock more.
  EXPECT_EQ(cloudtune::e2e::CountLines(log, "cloudtune: tuner on: instance local"), 1) << log;
  EXPECT_EQ(cloudtune::e2e::CountLines(log, "CLOUDTUNE_TARGET_EPOCHS"), 1) << log;
}

// `cloudtune status` against a live 2-worker run with CLOUDTUNE_HTTP set: one screen from the
// job's endpoint while it trains.
TEST(Defaults, StatusReadsALiveJob) {
  const fs::path dir = cloudtune::e2e::TempDir("cloudtune-defaults", "status");
  const int port = cloudtune::e2e::FreePort();
  const std::string url = "127.0.0.1:" + std::to_string(port);
  std::string log;
  // The run trains in the background; status is asked while it runs.
  auto run = std::async(std::launch::async, [&] {
    return RunExample(
        dir, "CLOUDTUNE=1 CLOUDTUNE_MEASURE_EVERY=10 CLOUDTUNE_HTTP=" + url + OffTheCloud(), 1500,
        &log);
  });
  const std::string out = (dir / "status.txt").string();
  const std::string cmd = "'" + std::string(CLOUDTUNE_BIN_DIR) + "/cloudtune' status http://" +
                          url + " --timeout 2 > '" + out + "' 2>&1";
  bool got = false;
  std::string text;
  for (int i = 0; i < 200 && !got; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (std::system(cmd.c_str()) != 0) continue;
    text = cloudtune::e2e::Slurp(out);
    got = text.find("step") != std::string::npos && text.find("advice") != std::string::npos &&
          text.find("advice    none yet") == std::string::npos;
  }
  ASSERT_EQ(run.get(), 0) << log;
  ASSERT_TRUE(got) << text << "\n" << log;
  EXPECT_NE(text.find("local"), std::string::npos) << text;
}

TEST(Defaults, MetadataNamesTheInstanceInTheStartRecord) {
  struct Case {
    std::string cloud, type, purchase;
  };
  for (const Case& c :
       {Case{"aws", "g4dn.12xlarge", "spot"}, Case{"gcp", "a2-highgpu-1g", "on-demand"},
        Case{"azure", "Standard_NC4as_T4_v3", "spot"}}) {
    cloudtune::test::FakeHttpServer server(
        cloudtune::test::CloudMetadata(c.cloud, c.type, c.purchase));
    const fs::path dir = cloudtune::e2e::TempDir("cloudtune-defaults", c.cloud);
    std::string log;
    ASSERT_EQ(RunExample(dir, "CLOUDTUNE=1 CLOUDTUNE_METADATA_URL=" + server.url(), 20, &log), 0)
        << log;
    const auto start = Records(dir / "cloudtune.sidecar.jsonl", "start");
    ASSERT_EQ(start.size(), 1u) << log;
    EXPECT_EQ(start[0]["instance"]["provider"], c.cloud) << start[0].dump();
    EXPECT_EQ(start[0]["instance"]["instance_type"], c.type) << start[0].dump();
    EXPECT_EQ(start[0]["instance"]["purchase"], c.purchase) << start[0].dump();
    EXPECT_TRUE(start[0]["instance"]["prices_known"].get<bool>());
  }
}

// The metadata names an AWS T4 machine; CLOUDTUNE_CLOUDS and CLOUDTUNE_GPUS keep every proposal on
// AWS T4 types once the job knows where it runs (it starts on the local pseudo-type).
TEST(Defaults, ProposalsStayOnTheCloudsAndGpusAllowed) {
  cloudtune::test::FakeHttpServer server(
      cloudtune::test::CloudMetadata("aws", "g4dn.12xlarge", "on-demand"));
  const fs::path dir = cloudtune::e2e::TempDir("cloudtune-defaults", "clouds");
  std::string log;
  ASSERT_EQ(RunExample(dir,
                       "CLOUDTUNE=1 CLOUDTUNE_CLOUDS=aws CLOUDTUNE_GPUS=t4 "
                       "CLOUDTUNE_METADATA_URL=" +
                           server.url(),
                       200, &log),
            0)
      << log;
  EXPECT_EQ(cloudtune::e2e::CountLines(log, "instance type(s) on aws with t4"), 1) << log;
  const auto start = Records(dir / "cloudtune.sidecar.jsonl", "start");
  ASSERT_EQ(start.size(), 1u) << log;
  EXPECT_EQ(start[0]["options"]["CLOUDTUNE_CLOUDS"], "aws") << start[0].dump();
  const auto recs = Records(dir / "cloudtune.sidecar.jsonl", "recommendation");
  ASSERT_GE(recs.size(), 1u) << log;
  const auto& catalog = cloudtune::search::DefaultCatalog();
  for (const json& r : recs) {
    std::vector<json> proposals = {r["proposed"]};
    for (const json& a : r["alternatives"]) proposals.push_back(a);
    for (const json& e : proposals) {
      const std::string type = e["config"]["instance_type"];
      const int i = catalog.Find(type);
      ASSERT_GE(i, 0) << type;
      EXPECT_EQ(catalog.types[i].cloud, "aws") << type;
      EXPECT_EQ(catalog.types[i].gpu_model, "T4") << type;
    }
  }
}

TEST(Defaults, HangingMetadataCostsAtMostTheBoundAndTrainingCompletes) {
  cloudtune::test::FakeHttpServer hang(cloudtune::test::CloudMetadata("hang", "", ""));
  const fs::path dir = cloudtune::e2e::TempDir("cloudtune-defaults", "hang");
  std::string log;
  ASSERT_EQ(RunExample(dir, "CLOUDTUNE=1 CLOUDTUNE_METADATA_URL=" + hang.url(), 20, &log), 0)
      << log;
  const auto start = Records(dir / "cloudtune.sidecar.jsonl", "start");
  ASSERT_EQ(start.size(), 1u) << log;
  EXPECT_EQ(start[0]["instance"]["instance_type"], "local");
  EXPECT_NE(start[0]["instance"]["note"].get<std::string>().find("no metadata answer"),
            std::string::npos)
      << start[0].dump();
  EXPECT_NE(log.find("test accuracy"), std::string::npos) << log;
}

}  // namespace
