#include "hooks/step_timer.h"

#include <gtest/gtest.h>

#include <thread>

namespace cloudtune::hooks {
namespace {

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(StepTimer, SplitsComputeAndSync) {
  StepTimer t;
  t.StepBegin();
  Sleep(20);
  t.SyncBegin();
  Sleep(30);
  t.SyncEnd();
  Sleep(5);
  StepSample s;
  ASSERT_TRUE(t.StepEnd(64, 2, &s));
  EXPECT_GE(s.sync_time, 0.030);
  EXPECT_GE(s.step_time, s.sync_time + 0.025);
  EXPECT_NEAR(s.compute_time(), s.step_time - s.sync_time, 1e-12);
  EXPECT_GE(s.compute_time(), 0.025);
  EXPECT_LT(s.sync_time, 0.030 + 0.5 * 0.025 + 0.05);  // sleep slack only
  EXPECT_EQ(s.local_bsz, 64);
  EXPECT_EQ(s.micro_steps, 2);
}

TEST(StepTimer, SumsSeveralSyncsAndClosesAnOpenOne) {
  StepTimer t;
  t.StepBegin();
  for (int i = 0; i < 3; ++i) {
    t.SyncBegin();
    Sleep(5);
    t.SyncEnd();
  }
  t.SyncBegin();
  Sleep(5);
  StepSample s;
  ASSERT_TRUE(t.StepEnd(1, 0, &s));
  EXPECT_GE(s.sync_time, 0.020);
  EXPECT_EQ(s.micro_steps, 1);  // clamped
}

TEST(StepTimer, StepEndWithoutBeginIsRejected) {
  StepTimer t;
  StepSample s;
  s.step_time = -1;
  EXPECT_FALSE(t.StepEnd(1, 1, &s));
  EXPECT_EQ(s.step_time, -1);
}

TEST(RunningStats, MeanStdMinMax) {
  RunningStats r;
  for (double x : {1.0, 2.0, 3.0, 4.0}) r.Add(x);
  EXPECT_DOUBLE_EQ(r.mean(), 2.5);
  EXPECT_NEAR(r.stddev(), 1.2909944487, 1e-9);
  EXPECT_EQ(r.min(), 1.0);
  EXPECT_EQ(r.max(), 4.0);
  r.Reset();
  EXPECT_EQ(r.count(), 0);
}

}  // namespace
}  // namespace cloudtune::hooks
