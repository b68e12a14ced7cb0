// Where the job runs: each cloud's metadata format from a fake server on 127.0.0.1, the DMI check
// that keeps "auto" from asking anything off a cloud VM, the time bound when the endpoint hangs,
// is closed or answers garbage, and the CUDA device name fallback.
#include "plugin/runtime/cloud.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "tests/fake_http.h"

namespace cloudtune::runtime {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

CloudInstance Detect(const std::string& url, const std::string& gpu = "", int gpus = 1) {
  CloudDetectOptions o;
  o.url = url;
  o.gpu_name = gpu;
  o.gpus_per_node = gpus;
  return DetectCloudInstance(o, search::DefaultCatalog());
}

TEST(Cloud, AwsImdsV2TypeAndLifeCycle) {
  test::FakeHttpServer aws(test::CloudMetadata("aws", "g4dn.12xlarge", "spot"));
  const CloudInstance c = Detect(aws.url());
  EXPECT_EQ(c.provider, "aws");
  EXPECT_EQ(c.instance_type, "g4dn.12xlarge");
  ASSERT_TRUE(c.purchase.has_value());
  EXPECT_EQ(*c.purchase, core::Purchase::kSpot);
  // The token was asked for with a PUT and sent with the GETs.
  const auto seen = aws.seen();
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[0].method, "PUT");
  EXPECT_EQ(seen[1].headers.at("x-aws-ec2-metadata-token"), "tok");
}

TEST(Cloud, GcpMachineTypeAndSpotScheduling) {
  test::FakeHttpServer gcp(test::CloudMetadata("gcp", "a2-highgpu-1g", "spot"));
  const CloudInstance c = Detect(gcp.url());
  EXPECT_EQ(c.provider, "gcp");
  EXPECT_EQ(c.instance_type, "a2-highgpu-1g");
  ASSERT_TRUE(c.purchase.has_value());
  EXPECT_EQ(*c.purchase, core::Purchase::kSpot);
}

TEST(Cloud, AzureVmSizeAndPriority) {
  test::FakeHttpServer azure(test::CloudMetadata("azure", "Standard_NC4as_T4_v3", "on-demand"));
  const CloudInstance c = Detect(azure.url());
  EXPECT_EQ(c.provider, "azure");
  EXPECT_EQ(c.instance_type, "Standard_NC4as_T4_v3");
  ASSERT_TRUE(c.purchase.has_value());
  EXPECT_EQ(*c.purchase, core::Purchase::kOnDemand);
}

TEST(Cloud, ATypeOutsideTheCatalogFallsBackWithANote) {
  test::FakeHttpServer aws(test::CloudMetadata("aws", "x9.mega", "on-demand"));
  const CloudInstance c = Detect(aws.url(), "Tesla T4", 4);
  // The metadata named a type the catalog lacks: the CUDA device decides, and the note says why.
  EXPECT_EQ(c.provider, "cuda");
  EXPECT_EQ(c.instance_type, search::InstanceForGpu(search::DefaultCatalog(), "Tesla T4", 4));
  EXPECT_FALSE(c.instance_type.empty());
  EXPECT_NE(c.note.find("x9.mega"), std::string::npos) << c.note;
}

// A hanging, garbage or closed endpoint costs at most the time bound (200 ms, with slack for a
// loaded machine), and nothing is found.
TEST(Cloud, HangingGarbageOrClosedEndpointsAreBounded) {
  test::FakeHttpServer hang(test::CloudMetadata("hang", "", ""));
  test::FakeHttpServer garbage(test::CloudMetadata("garbage", "", ""));
  for (const std::string& url : {hang.url(), garbage.url(), std::string("http://127.0.0.1:1")}) {
    const auto t0 = Clock::now();
    const CloudInstance c = Detect(url);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(s, 0.6) << url;
    EXPECT_TRUE(c.instance_type.empty()) << url << " -> " << c.instance_type;
    EXPECT_FALSE(c.note.empty()) << url;
  }
}

TEST(Cloud, AutoAsksNothingOffACloudVm) {
  const fs::path dmi = fs::path(::testing::TempDir()) / "dmi-qemu";
  fs::create_directories(dmi);
  std::ofstream(dmi / "sys_vendor") << "QEMU\n";
  CloudDetectOptions o;
  o.dmi_dir = dmi.string();
  const auto t0 = Clock::now();
  const CloudInstance c = DetectCloudInstance(o, search::DefaultCatalog());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.05);
  EXPECT_TRUE(c.instance_type.empty());
  EXPECT_NE(c.note.find("not a cloud VM"), std::string::npos) << c.note;
}

TEST(Cloud, DmiNamesTheCloud) {
  const fs::path root = fs::path(::testing::TempDir()) / "dmi";
  auto dir = [&](const std::string& name, const std::string& file, const std::string& text) {
    const fs::path d = root / name;
    fs::create_directories(d);
    std::ofstream(d / file) << text << "\n";
    return d.string();
  };
  EXPECT_EQ(CloudFromDmi(dir("aws", "sys_vendor", "Amazon EC2")), "aws");
  EXPECT_EQ(CloudFromDmi(dir("gcp", "product_name", "Google Compute Engine")), "gcp");
  EXPECT_EQ(CloudFromDmi(dir("azure", "chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77")),
            "azure");
  EXPECT_EQ(CloudFromDmi(dir("laptop", "sys_vendor", "LENOVO")), "");
  EXPECT_EQ(CloudFromDmi((root / "missing").string()), "");
}

TEST(Cloud, AnswersAreReadInEachFormat) {
  EXPECT_EQ(AwsLifeCycle("spot\n"), core::Purchase::kSpot);
  EXPECT_EQ(AwsLifeCycle("on-demand"), core::Purchase::kOnDemand);
  EXPECT_FALSE(AwsLifeCycle("<html>").has_value());
  EXPECT_EQ(GcpMachineType("projects/42/machineTypes/a2-highgpu-8g"), "a2-highgpu-8g");
  EXPECT_EQ(GcpScheduling("TRUE"), core::Purchase::kSpot);
  EXPECT_EQ(GcpScheduling("STANDARD"), core::Purchase::kOnDemand);
  std::string size;
  std::optional<core::Purchase> p;
  EXPECT_TRUE(AzureCompute(R"({"vmSize":"Standard_NC6s_v3","priority":"Low"})", &size, &p));
  EXPECT_EQ(size, "Standard_NC6s_v3");
  EXPECT_EQ(p, core::Purchase::kSpot);
  EXPECT_FALSE(AzureCompute("{not json", &size, &p));
  EXPECT_FALSE(AzureCompute(R"({"priority":"Spot"})", &size, &p));
}

TEST(Cloud, OffNeverAsks) {
  test::FakeHttpServer aws(test::CloudMetadata("aws", "g4dn.12xlarge", "spot"));
  CloudDetectOptions o;
  o.url = "off";
  const CloudInstance c = DetectCloudInstance(o, search::DefaultCatalog());
  EXPECT_TRUE(c.instance_type.empty());
  EXPECT_EQ(aws.requests(), 0);
}

}  // namespace
}  // namespace cloudtune::runtime
