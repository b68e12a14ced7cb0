#include "plugin/runtime/straggler.h"

#include <gtest/gtest.h>

#include <random>

using namespace cloudtune::runtime;

namespace {
RankWindow Window(long long step, std::mt19937& rng, int ranks, double base, double noise,
                  int slow_rank, double slow_factor) {
  std::normal_distribution<double> n(0, noise);
  RankWindow w;
  w.step = step;
  for (int r = 0; r < ranks; ++r)
    w.compute_time.push_back(base * (1 + n(rng)) * (r == slow_rank ? slow_factor : 1.0));
  return w;
}
}  // namespace

TEST(Straggler, DefaultOptionsAreValid) {
  std::string err;
  EXPECT_TRUE(StragglerOptions{}.IsValid(&err)) << err;
  StragglerOptions o;
  o.min_hits = o.windows + 1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_NE(err.find("min_hits"), std::string::npos);
  o = {};
  o.threshold = 0;
  EXPECT_FALSE(o.IsValid(&err));
}

TEST(Straggler, NoiseAloneIsNotAStraggler) {
  std::mt19937 rng(1);
  StragglerDetector d;
  for (int i = 0; i < 500; ++i)
    EXPECT_TRUE(d.AddWindow(Window(i * 50, rng, 8, 0.1, 0.05, -1, 1)).empty()) << i;
  EXPECT_TRUE(d.Stragglers().empty());
  EXPECT_DOUBLE_EQ(d.Factor(), 1.0);
}

TEST(Straggler, ConsistentlySlowRankIsReportedOnceWithEvidence) {
  std::mt19937 rng(2);
  StragglerOptions o;
  StragglerDetector d(o);
  int reports = 0, first_at = -1;
  StragglerReport rep;
  for (int i = 0; i < 40; ++i) {
    auto out = d.AddWindow(Window(i * 50, rng, 4, 0.1, 0.03, 2, 1.4));
    if (!out.empty()) {
      reports += static_cast<int>(out.size());
      if (first_at < 0) first_at = i;
      rep = out[0];
    }
  }
  EXPECT_EQ(reports, 1);
  EXPECT_GE(first_at, o.min_hits - 1);
  EXPECT_LE(first_at, o.windows + 2);
  EXPECT_EQ(rep.rank, 2);
  EXPECT_GE(rep.hits, o.min_hits);
  EXPECT_NEAR(rep.ratio, 1.4, 0.1);
  EXPECT_NEAR(rep.factor, 1.4, 0.15);
  EXPECT_EQ(rep.recent_ratios.size(), rep.steps.size());
  EXPECT_EQ(rep.last_compute_time.size(), 4u);
  const auto j = rep.ToJson();
  EXPECT_EQ(j["schema"], "cloudtune.straggler/1");
  EXPECT_EQ(j["rank"], 2);
  EXPECT_EQ(d.Stragglers(), std::vector<int>{2});
  EXPECT_NEAR(d.Factor(), 1.4, 0.15);
}

TEST(Straggler, IsolatedSpikesAreIgnoredAndRecoveryClears) {
  StragglerDetector d;
  std::mt19937 rng(3);
  for (int i = 0; i < 100; ++i) {
    const int slow = (i % 4 == 0) ? 1 : -1;  // 25% of windows: below min_hits of 8
    EXPECT_TRUE(d.AddWindow(Window(i, rng, 4, 0.1, 0.01, slow, 2.0)).empty());
  }
  // Now consistently slow, then recovered: flagged, then cleared, then can be reported again.
  int reports = 0;
  for (int i = 0; i < 20; ++i) reports += d.AddWindow(Window(i, rng, 4, 0.1, 0.01, 3, 1.5)).size();
  EXPECT_EQ(reports, 1);
  for (int i = 0; i < 20; ++i) d.AddWindow(Window(i, rng, 4, 0.1, 0.01, -1, 1));
  EXPECT_TRUE(d.Stragglers().empty());
  for (int i = 0; i < 20; ++i) reports += d.AddWindow(Window(i, rng, 4, 0.1, 0.01, 3, 1.5)).size();
  EXPECT_EQ(reports, 2);
}

TEST(Straggler, BadWindowsAndResizes) {
  StragglerDetector d;
  EXPECT_TRUE(d.AddWindow({1, {0.1}, {}}).empty());                // one rank: nothing to compare
  EXPECT_TRUE(d.AddWindow({1, {0.1, -1.0}, {}}).empty());          // negative: ignored
  EXPECT_TRUE(d.AddWindow({1, {0.1, std::nan("")}, {}}).empty());  // NaN: ignored
  std::mt19937 rng(4);
  for (int i = 0; i < 7; ++i) d.AddWindow(Window(i, rng, 4, 0.1, 0.01, 0, 1.5));
  // Resized to 3 ranks: history reset, so 5 more slow windows are not enough (min_hits 6).
  int reports = 0;
  for (int i = 0; i < 5; ++i) reports += d.AddWindow(Window(i, rng, 3, 0.1, 0.01, 0, 1.5)).size();
  EXPECT_EQ(reports, 0);
  reports += d.AddWindow(Window(5, rng, 3, 0.1, 0.01, 0, 1.5)).size();
  EXPECT_EQ(reports, 1);
}

TEST(Straggler, TinyAbsoluteDifferencesDoNotCount) {
  StragglerDetector d;  // min_excess_seconds = 0.5 ms
  for (int i = 0; i < 50; ++i)
    EXPECT_TRUE(d.AddWindow({i, {0.0001, 0.0001, 0.0003, 0.0001}, {}}).empty());
}
