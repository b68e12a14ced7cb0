#include "estimator/core/trace.h"

#include <gtest/gtest.h>

#include <sstream>

#include "estimator/core/error.h"
#include "tests/shared_data.h"

namespace cloudtune::estimator {
namespace {

std::string ErrorOf(const std::string& text) {
  std::istringstream in(text);
  try {
    ParseTrace(in, "t.csv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Trace, PlacementLayoutAveragesRowsPerConfiguration) {
  std::istringstream in(
      "placement,local_bsz,step_time,sync_time\n"
      "1244,32,0.4,0.1\n"
      "1244,32,0.6,0.3\n"
      "4,32,0.2,0.05\n");
  auto ms = ParseTrace(in, "t.csv");
  ASSERT_EQ(ms.size(), 2u);
  const Measurement* m = nullptr;
  for (auto& x : ms)
    if (x.key.num_nodes == 4) m = &x;
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->key.num_replicas, 11);
  EXPECT_EQ(m->max_gpus_per_node, 4);
  EXPECT_EQ(m->rows, 2);
  EXPECT_DOUBLE_EQ(m->step_time, 0.5);
  EXPECT_DOUBLE_EQ(m->sync_time, 0.2);
  EXPECT_EQ(m->key.global_batch(), 11 * 32);
}

TEST(Trace, NodesLayoutAnyColumnOrderWithOptionalColumns) {
  std::istringstream in(
      "sync_time,instance_type,step_time,local_bsz,num_replicas,num_nodes,accum_steps\n"
      "0.1,g4dn.12xlarge,0.5,64,8,2,1\n");
  auto ms = ParseTrace(in, "t.csv");
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].key.num_nodes, 2);
  EXPECT_EQ(ms[0].key.num_replicas, 8);
  EXPECT_EQ(ms[0].key.accum_steps, 1);
  EXPECT_EQ(ms[0].key.instance_type, "g4dn.12xlarge");
  EXPECT_EQ(ms[0].key.global_batch(), 8 * 64 * 2);
}

TEST(Trace, BadInputNamesFileLineAndColumn) {
  EXPECT_EQ(ErrorOf(""), "t.csv:1: empty file (no header)");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time\n1,2,3\n"),
            "t.csv:1: missing column 'sync_time'");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time,sync_time\n"),
            "t.csv:1: no data rows after the header");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time,sync_time\n1,32,abc,0.1\n"),
            "t.csv:2:3: step_time: 'abc' is not a finite number");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time,sync_time\n1,32,0.5,-0.1\n"),
            "t.csv:2:4: sync_time: -0.1 is negative");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time,sync_time\n1,3.5,0.5,0.1\n"),
            "t.csv:2:2: local_bsz: '3.5' is not an integer");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time,sync_time\n1x,3,0.5,0.1\n"),
            "t.csv:2:1: placement: '1x' is not a string of per-node GPU counts (digits 1-9)");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time,sync_time\n1,32,0.5\n"),
            "t.csv:2: expected 4 fields, found 3");
  EXPECT_EQ(ErrorOf("placement,local_bsz,step_time,sync_time\n1,32,0.5,0.1\n1,32,0.5,0.9\n"),
            "t.csv:2:4: sync_time: configuration (num_nodes=1, num_replicas=1, local_bsz=32, "
            "accum_steps=0) has mean sync_time 0.5 >= step_time 0.5");
}

TEST(Trace, MissingFile) {
  try {
    ReadTraces({"/nonexistent/x.csv"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/x.csv: cannot open");
  }
}

TEST(Trace, ReadsShippedPolluxTraces) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string d = CLOUDTUNE_SHARED_DIR "/data/traces/pollux-t4/cifar10/";
  auto ms = ReadTraces({d + "placements.csv", d + "scalability.csv"});
  EXPECT_GT(ms.size(), 50u);
  for (auto& m : ms) EXPECT_LT(m.sync_time, m.step_time);
}

TEST(Trace, WriteThenParseRoundTrips) {
  std::istringstream in(
      "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,4,16,0.25,0.125\n");
  auto ms = ParseTrace(in, "a");
  std::ostringstream out;
  WriteTrace(out, ms);
  std::istringstream in2(out.str());
  auto back = ParseTrace(in2, "b");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].key, ms[0].key);
  EXPECT_DOUBLE_EQ(back[0].step_time, 0.25);
}

}  // namespace
}  // namespace cloudtune::estimator
