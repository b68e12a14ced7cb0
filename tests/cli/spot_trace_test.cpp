#include "cli/replay/spot_trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "estimator/core/error.h"

namespace cloudtune::replay {
namespace {

std::string Message(const std::string& text) {
  try {
    SpotTrace::Parse(text, "t.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A hand-made 4-node trace, 600 s ticks: full, then 2 left for two ticks, full, then none.
const char* kFour = R"({"metadata": {"gap_seconds": 600}, "data": [4, 4, 2, 2, 4, 0]})";

TEST(SpotTrace, CountReadingGivesTheNodesThatCanBeHad) {
  const SpotTrace t = SpotTrace::Parse(kFour, "four.json");
  EXPECT_EQ(t.ticks(), 6u);
  EXPECT_DOUBLE_EQ(t.duration_s(), 3600);
  EXPECT_EQ(t.Available(0, 4, SpotReading::kCount), 4);
  EXPECT_EQ(t.Available(1300, 4, SpotReading::kCount), 2);
  EXPECT_EQ(t.Available(1300, 1, SpotReading::kCount), 1);  // one node fits in two
  EXPECT_EQ(t.Available(3000, 4, SpotReading::kCount), 0);
  EXPECT_EQ(t.Available(3600 + 1300, 4, SpotReading::kCount), 2);  // the trace repeats
  EXPECT_EQ(t.Available(100, 4, SpotReading::kCount, /*offset_s=*/1200), 2);
  // A cluster of 4 running from t = 0 is revoked at the third tick; one of 2 only at the sixth.
  EXPECT_DOUBLE_EQ(t.NextShortage(0, 4, SpotReading::kCount, 0, 1e6), 1200);
  EXPECT_DOUBLE_EQ(t.NextShortage(0, 2, SpotReading::kCount, 0, 1e6), 3000);
  EXPECT_TRUE(std::isinf(t.NextShortage(0, 2, SpotReading::kCount, 0, 2000)));
  const auto s = t.Summarise(4, SpotReading::kCount);
  EXPECT_NEAR(s.up_share, 0.5, 1e-12);
  EXPECT_NEAR(s.revocations_per_hour_up, 2 / 0.5, 1e-12);  // two drops in 0.5 h up
  EXPECT_NEAR(s.longest_outage_h, 1.0 / 3, 1e-12);
}

TEST(SpotTrace, TheTwoReadingsOfASingleNodeTraceDisagree) {
  const SpotTrace t =
      SpotTrace::Parse(R"({"metadata": {"gap_seconds": 32}, "data": [0, 1, 1, 0]})", "one.json");
  // count: 0 = nothing to have; zero-is-up: 0 = spot is available.
  EXPECT_EQ(t.Available(0, 1, SpotReading::kCount), 0);
  EXPECT_EQ(t.Available(0, 1, SpotReading::kZeroIsUp), 1);
  EXPECT_EQ(t.Available(40, 1, SpotReading::kCount), 1);
  EXPECT_EQ(t.Available(40, 1, SpotReading::kZeroIsUp), 0);
  EXPECT_NEAR(t.Summarise(1, SpotReading::kCount).up_share, 0.5, 1e-12);
  EXPECT_NEAR(t.Summarise(1, SpotReading::kZeroIsUp).up_share, 0.5, 1e-12);
  EXPECT_EQ(ParseSpotReading("count", "x"), SpotReading::kCount);
  EXPECT_EQ(ParseSpotReading("zero-is-up", "x"), SpotReading::kZeroIsUp);
  try {
    ParseSpotReading("maybe", "s.json: spot.reading");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "s.json: spot.reading: 'maybe' is not a spot trace reading (count or zero-is-up)");
  }
}

// A type's zones: a request gets the zone with the most nodes; a trace alone is one zone.
TEST(SpotTrace, AMarketOfZones) {
  SpotMarket m;
  m.AddZone("a", SpotTrace::Parse(kFour, "a.json"));  // 4, 4, 2, 2, 4, 0
  m.AddZone("b",
            SpotTrace::Parse(R"({"metadata": {"gap_seconds": 600}, "data": [1, 3, 3, 4, 1, 2]})",
                             "b.json"));
  ASSERT_EQ(m.zones(), 2u);
  EXPECT_EQ(m.zone_name(1), "b");
  const SpotReading c = SpotReading::kCount;
  EXPECT_EQ(m.Available(0, 4, c), 4);
  EXPECT_EQ(m.BestZone(0, 4, c), 0u);
  EXPECT_EQ(m.Available(1300, 4, c), 3);  // a has 2, b 3
  EXPECT_EQ(m.BestZone(1300, 4, c), 1u);
  EXPECT_EQ(m.BestZone(1300, 2, c), 0u);  // both have the 2 asked for: the first
  EXPECT_EQ(m.Available(3000, 4, c), 2);  // a has none
  EXPECT_EQ(m.BestZone(3000, 4, c), 1u);
  const SpotMarket one = SpotTrace::Parse(kFour, "four.json");
  EXPECT_EQ(one.zones(), 1u);
  EXPECT_EQ(one.zone_name(0), "");
  EXPECT_EQ(one.Available(1300, 4, c), 2);
  EXPECT_EQ(one.BestZone(3000, 4, c), 0u);  // no zone has any: the first
}

TEST(SpotTrace, BadFilesAreNamed) {
  EXPECT_EQ(Message("{").rfind("t.json: not valid JSON (", 0), 0u);
  EXPECT_EQ(Message(R"({"data": [1]})"), "t.json: metadata: missing object");
  EXPECT_EQ(Message(R"({"metadata": {"gap_seconds": 0}, "data": [1]})"),
            "t.json: metadata.gap_seconds: expected a positive number");
  EXPECT_EQ(Message(R"({"metadata": {"gap_seconds": 60}, "data": []})"),
            "t.json: data: expected a non-empty array");
  EXPECT_EQ(Message(R"({"metadata": {"gap_seconds": 60}, "data": [1, -2]})"),
            "t.json: data[1]: expected an integer >= 0, got -2");
  EXPECT_EQ(Message(R"({"metadata": {"gap_seconds": 60}, "data": [1, "x"]})"),
            "t.json: data[1]: expected an integer >= 0, got \"x\"");
  EXPECT_THROW(SpotTrace::Load("/nonexistent/t.json"), InputError);
}

// The shipped AWS traces load, and single-node V100 spot is revoked often under both readings.
TEST(SpotTrace, RealPreemptionTrace) {
  const std::string dir =
      std::string(CLOUDTUNE_SHARED_DIR) + "/data/spot-traces/preemption/1-node/aws-04-22-2023/";
  const std::string path = dir + "us-west-2b_v100_1.json";
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
  } else {
    GTEST_SKIP() << path << " not found";
  }
  const SpotTrace t = SpotTrace::Load(path);
  EXPECT_DOUBLE_EQ(t.gap_seconds(), 32);
  EXPECT_GT(t.duration_s(), 5 * 86400.0);
  for (SpotReading r : {SpotReading::kCount, SpotReading::kZeroIsUp}) {
    const auto s = t.Summarise(1, r);
    EXPECT_GT(s.up_share, 0.0) << SpotReadingName(r);
    EXPECT_LT(s.up_share, 1.0) << SpotReadingName(r);
    EXPECT_GT(s.revocations_per_hour_up, 0.05) << SpotReadingName(r);
  }
}

}  // namespace
}  // namespace cloudtune::replay
