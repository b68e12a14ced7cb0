#include "search/catalog.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "estimator/core/error.h"

namespace cloudtune::search {
namespace {

std::map<std::string, GpuSpec> Gpus() {
  std::istringstream in("gpu_model,fp32_tflops,memory_gib\nT4,8.1,16\nV100,15.7,16\n");
  return ParseGpuSpecs(in, "g.csv");
}

std::string ErrorOf(const std::string& csv) {
  std::istringstream in(csv);
  try {
    ParseInstances(in, "c.csv", Gpus());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const char* kHeader =
    "cloud,region,instance_type,gpu_model,gpus,ondemand_usd_per_hour,spot_usd_per_hour\n";

TEST(Catalog, OptionsDefaultsAreValid) {
  std::string err;
  EXPECT_TRUE(CatalogOptions{}.IsValid(&err)) << err;
  CatalogOptions o;
  o.default_network_gbps = 0;
  EXPECT_FALSE(o.IsValid(&err));
}

TEST(Catalog, RevocationRateFromBand) {
  // p = 1 - exp(-730 λ): 10% per month -> λ = -ln(0.9)/730.
  EXPECT_NEAR(RevocationRateFromMonthlyShare(0.10), 1.4433e-4, 1e-8);
  CatalogOptions o;
  EXPECT_DOUBLE_EQ(BandMidpoint("10-15%", o, ""), 0.125);
  EXPECT_DOUBLE_EQ(BandMidpoint(">20%", o, ""), 0.30);
  std::istringstream in(
      std::string("cloud,region,instance_type,gpu_model,gpus,ondemand_usd_per_hour,"
                  "spot_usd_per_hour,interruption_band\n") +
      "aws,us-east-1,x,T4,4,3.912,1.244,10-15%\ngcp,c,y,T4,1,1,0.3,\n");
  auto ts = ParseInstances(in, "c.csv", Gpus());
  EXPECT_NEAR(ts[0].revocation_per_hour, -std::log(0.875) / 730, 1e-12);
  EXPECT_TRUE(ts[0].revocation_measured);
  EXPECT_FALSE(ts[1].revocation_measured);  // GCP: documented default, flagged
  EXPECT_DOUBLE_EQ(ts[1].revocation_per_hour, CatalogOptions{}.default_revocation_per_hour);
  EXPECT_FALSE(ts[1].network_measured);
}

TEST(Catalog, DefaultCatalogIsEmbedded) {
  const Catalog& c = DefaultCatalog();
  EXPECT_EQ(c.types.size(), 95u);
  int i = c.Find("g4dn.12xlarge");
  ASSERT_GE(i, 0);
  EXPECT_EQ(c.types[i].gpus, 4);
  EXPECT_DOUBLE_EQ(c.types[i].ondemand_per_hour, 3.912);
  EXPECT_DOUBLE_EQ(c.types[i].spot_per_hour, 1.244);
  EXPECT_EQ(c.types[i].revocation_source, "spot-advisor 10-15%");
  EXPECT_NE(c.source.find("shared/data/catalog"), std::string::npos);
}

TEST(Catalog, BadInputMessages) {
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,r,a,T4,,1,0.5\n"),
            "c.csv:2: a: gpus: missing value");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,r,a,T4,1,-1,0.5\n"),
            "c.csv:2: a: ondemand_usd_per_hour: negative value -1");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,r,a,T4,1,1,0.5\naws,r,a,T4,1,1,0.5\n"),
            "c.csv:3: a: instance_type: duplicate instance type");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,r,a,Z9,1,1,0.5\n"),
            "c.csv:2: a: gpu_model: unknown GPU 'Z9' (not in the GPU specs: give its figures, "
            "gpu_fp32_tflops and/or gpu_memory_bandwidth_gbs)");
  EXPECT_EQ(ErrorOf("cloud,region,instance_type,gpu_model,gpus,ondemand_usd_per_hour,"
                    "gpu_fp32_tflops\naws,r,a,Z9,1,1,-13\n"),
            "c.csv:2: a: gpu_fp32_tflops: negative value -13");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,r,a,T4,1,1,abc\n"),
            "c.csv:2: a: spot_usd_per_hour: 'abc' is not a number");
  EXPECT_EQ(ErrorOf("cloud,region,instance_type,gpu_model,gpus\naws,r,a,T4,1\n"),
            "c.csv: missing column 'ondemand_usd_per_hour'");
  EXPECT_EQ(ErrorOf(std::string("cloud,region,instance_type,gpu_model,gpus,ondemand_usd_per_hour,"
                                "interruption_band\naws,r,a,T4,1,1,30%\n")),
            "c.csv:2: a: interruption_band: unknown interruption band '30%' (expected <5%, "
            "5-10%, 10-15%, 15-20% or >20%)");
}

// A catalog of one's own may name a GPU the specs do not know by giving its figures; the type then
// has hardware figures for the throughput model's priors, and later rows may name the GPU alone.
TEST(Catalog, ARowGivesTheFiguresOfAGpuTheSpecsDoNotKnow) {
  const std::string path = ::testing::TempDir() + "/onprem_catalog.csv";
  {
    std::ofstream f(path);
    f << "cloud,region,instance_type,gpu_model,gpus,ondemand_usd_per_hour,network_gbps,"
         "gpu_fp32_tflops,gpu_memory_bandwidth_gbs,gpu_memory_gib\n"
         "onprem,lab,rtx.8x,RTX2080Ti,8,20,100,13.4,616,11\n"
         "onprem,lab,rtx.4x,RTX2080Ti,4,10,,,,\n"
         "onprem,lab,t4.4x,T4,4,4,,99,,\n";  // a known GPU's figures are the specs'
  }
  const Catalog c = LoadCatalog(path, DefaultCatalog(), true);
  const estimator::Hardware big = HardwareOf(c, "rtx.8x");
  EXPECT_DOUBLE_EQ(big.gpu_tflops, 13.4);
  EXPECT_DOUBLE_EQ(big.memory_bandwidth_gbs, 616);
  EXPECT_DOUBLE_EQ(big.network_gbps, 100);
  const estimator::Hardware small = HardwareOf(c, "rtx.4x");
  EXPECT_DOUBLE_EQ(small.gpu_tflops, 13.4);
  EXPECT_DOUBLE_EQ(small.network_gbps, 0);  // not given: the catalog's default, not a figure
  EXPECT_DOUBLE_EQ(c.types[c.Find("rtx.4x")].gpu_memory_gib, 11);
  EXPECT_DOUBLE_EQ(HardwareOf(c, "t4.4x").gpu_tflops, 8.1);
  EXPECT_DOUBLE_EQ(HardwareOf(c, "RTX2080Ti").gpu_tflops, 13.4);  // by the GPU's name too
  EXPECT_FALSE(DefaultCatalog().Gpu("RTX2080Ti"));                // the base is unchanged
}

TEST(Catalog, TypesOnCloudsWithGpus) {
  std::istringstream in(std::string(kHeader) +
                        "aws,r,a.t4,T4,4,3.9,1.2\n"
                        "aws,r,a.v100,V100,8,24,7\n"
                        "gcp,r,g.t4,T4,1,0.5,0.2\n");
  Catalog c;
  c.types = ParseInstances(in, "c.csv", Gpus());
  using V = std::vector<std::string>;
  EXPECT_EQ(TypesOn(c, {}, {}), V({"a.t4", "a.v100", "g.t4"}));
  EXPECT_EQ(TypesOn(c, {"AWS"}, {}), V({"a.t4", "a.v100"}));
  EXPECT_EQ(TypesOn(c, {}, {"t4"}), V({"a.t4", "g.t4"}));
  EXPECT_EQ(TypesOn(c, {"gcp", "aws"}, {"V100"}), V({"a.v100"}));
  auto error = [&](const V& clouds, const V& gpus) -> std::string {
    try {
      TypesOn(c, clouds, gpus);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error({"aws", "azure"}, {}),
            "no instance type of the catalog has cloud 'azure' (it has aws, gcp)");
  EXPECT_EQ(error({}, {"A100"}),
            "no instance type of the catalog has GPU model 'A100' (it has T4, V100)");
  EXPECT_NE(error({"gcp"}, {"V100"}).find("on those clouds with those GPUs"), std::string::npos);
}

}  // namespace
}  // namespace cloudtune::search
