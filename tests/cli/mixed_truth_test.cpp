// The replay's truth of a mixed cluster, composed from each type's measured rows
// (cli/replay/mixed_truth.h), on hand-made traces of two catalog types.
#include "cli/replay/mixed_truth.h"

#include <gtest/gtest.h>

#include <vector>

#include "search/catalog.h"

namespace cloudtune::replay {
namespace {

core::Measurement Row(const std::string& type, int nodes, int replicas, int bsz, double compute,
                      double sync) {
  core::Measurement m;
  m.key = {nodes, replicas, bsz, 0, type};
  m.step_time = compute + sync;
  m.sync_time = sync;
  m.rows = 1;
  return m;
}

// g4dn.12xlarge (4 T4, 50 Gbps): one node at local batches 32 and 64, two and four nodes;
// p3.16xlarge (8 V100, 25 Gbps): one node only.
std::vector<core::Measurement> Traces() {
  const std::string a = "g4dn.12xlarge", b = "p3.16xlarge";
  return {Row(a, 1, 4, 32, 0.10, 0.01),  Row(a, 1, 4, 64, 0.20, 0.01),
          Row(a, 2, 8, 32, 0.10, 0.04),  Row(a, 2, 8, 64, 0.20, 0.06),
          Row(a, 4, 16, 32, 0.10, 0.08), Row(a, 4, 16, 64, 0.20, 0.12),
          Row(b, 1, 8, 32, 0.05, 0.02),  Row(b, 1, 8, 64, 0.10, 0.02)};
}

search::MixedConfig Cluster(int a_nodes, int b_nodes) {
  search::MixedConfig c;
  c.parts.push_back({"g4dn.12xlarge", a_nodes, 4, core::Purchase::kSpot});
  if (b_nodes > 0) c.parts.push_back({"p3.16xlarge", b_nodes, 8, core::Purchase::kOnDemand});
  return c;
}

TEST(MixedTruth, ComputeIsLinearInTheLocalBatchWithinTheMeasuredRange) {
  const auto traces = Traces();
  const MixedTruth truth(search::DefaultCatalog(), traces);
  EXPECT_NEAR(*truth.Compute("g4dn.12xlarge", 4, 48), 0.15, 1e-12);
  EXPECT_NEAR(*truth.Compute("g4dn.12xlarge", 4, 96), 0.30, 1e-12);  // 1.5x the largest
  EXPECT_NEAR(*truth.Compute("g4dn.12xlarge", 4, 16), 0.05, 1e-12);  // 0.5x the smallest
  EXPECT_FALSE(truth.Compute("g4dn.12xlarge", 4, 97));
  EXPECT_FALSE(truth.Compute("g4dn.12xlarge", 4, 15));
  EXPECT_FALSE(truth.Compute("g4dn.12xlarge", 2, 32));  // no row with 2 GPUs per node
  EXPECT_FALSE(truth.Compute("p3.8xlarge", 4, 32));     // no row of the type
}

TEST(MixedTruth, SyncIsTheMeasuredMedianBetweenMeasuredNodeCounts) {
  const auto traces = Traces();
  const MixedTruth truth(search::DefaultCatalog(), traces);
  EXPECT_NEAR(*truth.Sync("g4dn.12xlarge", 2, 4), 0.05, 1e-12);   // median of 0.04 and 0.06
  EXPECT_NEAR(*truth.Sync("g4dn.12xlarge", 3, 4), 0.075, 1e-12);  // between 2 (0.05) and 4 (0.10)
  EXPECT_FALSE(truth.Sync("g4dn.12xlarge", 5, 4));                // beyond the largest count
  EXPECT_FALSE(truth.Sync("p3.16xlarge", 2, 8));                  // one node measured
}

TEST(MixedTruth, SlowestComputePlusTheRingAtItsSlowestLink) {
  const auto traces = Traces();
  const auto& catalog = search::DefaultCatalog();
  const MixedTruth truth(catalog, traces);
  const double a_gbps = catalog.types[catalog.Find("g4dn.12xlarge")].network_gbps;
  const double b_gbps = catalog.types[catalog.Find("p3.16xlarge")].network_gbps;
  ASSERT_GT(a_gbps, b_gbps);
  // 2 T4 nodes at 48 (0.15 s) and one V100 node at 96 (0.15 s): balanced; 3 nodes: the T4 ring's
  // 0.075 s scaled to the slower link.
  auto step = truth.Step(Cluster(2, 1), {48, 96});
  ASSERT_TRUE(step);
  EXPECT_NEAR(step->sync_time, 0.075 * a_gbps / b_gbps, 1e-12);
  EXPECT_NEAR(step->step_time, 0.15 + 0.075 * a_gbps / b_gbps, 1e-12);
  // Unbalanced: the slower part sets the pace.
  step = truth.Step(Cluster(2, 1), {64, 40});
  ASSERT_TRUE(step);
  EXPECT_NEAR(step->step_time, 0.20 + step->sync_time, 1e-12);
  // Not composable: a node count no type has measured, a batch outside the rows, a size mismatch.
  EXPECT_FALSE(truth.Step(Cluster(4, 1), {48, 96}));
  EXPECT_FALSE(truth.Step(Cluster(2, 1), {48, 200}));
  EXPECT_FALSE(truth.Step(Cluster(2, 1), {48}));
}

TEST(MixedTruth, OneHardwareAtOneBatchIsItsMeasuredRow) {
  const auto traces = Traces();
  const MixedTruth truth(search::DefaultCatalog(), traces);
  search::MixedConfig c = Cluster(1, 0);
  c.parts.push_back({"g4dn.12xlarge", 1, 4, core::Purchase::kOnDemand});  // 1 spot + 1 on demand
  const auto step = truth.Step(c, {64, 64});
  ASSERT_TRUE(step);
  EXPECT_DOUBLE_EQ(step->step_time, 0.26);  // the 2-node row at 64
  EXPECT_DOUBLE_EQ(step->sync_time, 0.06);
}

}  // namespace
}  // namespace cloudtune::replay
