#include "cli/replay/measured_steps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "estimator/core/error.h"

namespace cloudtune::replay {
namespace {

// Two hand-made runs: at batch 100 the metric reaches 0.5 at iteration 100 and 0.8 at 400; at
// batch 400 (4x) it reaches 0.5 at 40 and 0.8 at 100 (a noisy dip at 60 does not count).
const std::map<int, std::string> kRuns = {
    {100,
     "progress,iteration,metric,grad_sqr,grad_var\n1,100,0.5,1,1\n2,200,0.6,1,1\n"
     "3,400,0.8,1,1\n4,500,0.82,1,1\n"},
    {400,
     "progress,iteration,metric,grad_sqr,grad_var\n1,40,0.5,1,1\n2,60,0.45,1,1\n"
     "3,100,0.8,1,1\n"}};

TEST(MeasuredSteps, IterationsToAMetricAtMeasuredAndInterpolatedBatches) {
  const MeasuredSteps m = MeasuredSteps::Parse(kRuns, "v");
  EXPECT_EQ(m.batches(), (std::vector<int>{100, 400}));
  EXPECT_DOUBLE_EQ(m.CommonTarget(), 0.8);  // batch 400 never got beyond 0.8
  EXPECT_DOUBLE_EQ(m.StartMetric(), 0.5);
  EXPECT_DOUBLE_EQ(m.StepsBetween(100, 0.5, 0.8), 300);
  EXPECT_DOUBLE_EQ(m.StepsBetween(100, 0.6, 0.7), 100);  // linear between rows 200 and 400
  EXPECT_DOUBLE_EQ(m.StepsBetween(400, 0.5, 0.8), 60);   // the dip at 60 does not lower the best
  // At 200 (half-way in log B): geometric mean of the neighbours' iterations.
  EXPECT_NEAR(m.StepsBetween(200, 0.0, 0.8), std::sqrt(400.0 * 100.0), 1e-9);
  // The state carried across a batch change is the metric: 100 steps at 100, then the rest at 400.
  const double reached = m.MetricAfter(100, 0.5, 100);
  EXPECT_NEAR(reached, 0.6, 1e-9);
  // At 400 the best metric rises from 0.5 at iteration 40 to 0.8 at 100 (the dip row is no rise):
  // 0.6 at 40 + 60/3.
  EXPECT_NEAR(m.StepsBetween(400, reached, 0.8), 100 - (40 + 60.0 / 3), 1e-6);
  EXPECT_LT(m.StepsBetween(400, reached, 0.8), m.StepsBetween(400, 0.5, 0.8));
  // Batches outside the measured range are not offered.
  try {
    m.StepsBetween(800, 0.5, 0.8);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the measured batches [100, 400]"),
              std::string::npos)
        << e.what();
  }
}

// The progress reading: the runs' own progress column is the state, so a batch change keeps the
// job at the same point of its schedule (the metric's dip and rise do not matter).
TEST(MeasuredSteps, ProgressCarry) {
  const MeasuredSteps m = MeasuredSteps::Parse(kRuns, "v", MeasuredSteps::Carry::kProgress);
  EXPECT_EQ(m.carry(), MeasuredSteps::Carry::kProgress);
  EXPECT_DOUBLE_EQ(m.StartMetric(), 0);   // progress starts at 0 (iteration 0)
  EXPECT_DOUBLE_EQ(m.CommonTarget(), 3);  // the run at 400 ends at progress 3
  EXPECT_DOUBLE_EQ(m.StepsBetween(100, 0, 3), 400);
  EXPECT_DOUBLE_EQ(m.StepsBetween(400, 0, 3), 100);
  EXPECT_DOUBLE_EQ(m.StepsBetween(400, 1, 2), 20);  // the metric's dip row is progress 2 at 60
  // 100 steps at batch 100 reach progress 1; the rest at 400 follows its run from progress 1.
  const double reached = m.MetricAfter(100, 0, 100);
  EXPECT_NEAR(reached, 1, 1e-9);
  EXPECT_NEAR(m.StepsBetween(400, reached, 3), 60, 1e-9);
  EXPECT_EQ(MeasuredSteps::ParseCarry("progress", "x"), MeasuredSteps::Carry::kProgress);
  try {
    MeasuredSteps::ParseCarry("epochs", "s.json: carry");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "s.json: carry: 'epochs' (expected metric or progress)");
  }
  try {
    MeasuredSteps::Parse({{64, "iteration,metric\n5,0.1\n"}}, "v.csv",
                         MeasuredSteps::Carry::kProgress);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "v.csv:1: missing column 'progress'");
  }
}

// kRuns with the metric an error rate (1 - accuracy): lower is better.
std::map<int, std::string> Falling() {
  return {{100,
           "progress,iteration,metric,grad_sqr,grad_var\n1,100,0.5,1,1\n2,200,0.4,1,1\n"
           "3,400,0.2,1,1\n4,500,0.18,1,1\n"},
          {400,
           "progress,iteration,metric,grad_sqr,grad_var\n1,40,0.5,1,1\n2,60,0.55,1,1\n"
           "3,100,0.2,1,1\n"}};
}

// A metric that falls as the job learns is read from the runs and carried negated: the steps
// between two levels are the rising metric's, and the target is the lowest value every run
// reaches. Each run starts at its first row.
TEST(MeasuredSteps, AFallingMetricIsCarriedNegated) {
  const MeasuredSteps up = MeasuredSteps::Parse(kRuns, "v");
  const MeasuredSteps m = MeasuredSteps::Parse(Falling(), "v");
  EXPECT_FALSE(up.negated());
  ASSERT_TRUE(m.negated());
  EXPECT_DOUBLE_EQ(m.Carried(0.2), -0.2);
  EXPECT_DOUBLE_EQ(m.Metric(m.CommonTarget()), 0.2);  // batch 400 never got below 0.2
  EXPECT_DOUBLE_EQ(m.Metric(m.StartMetric()), 0.5);
  EXPECT_DOUBLE_EQ(m.Origin(), m.StartMetric());
  EXPECT_DOUBLE_EQ(up.Origin(), 0);
  for (int b : {100, 200, 400})
    EXPECT_NEAR(m.StepsBetween(b, m.Carried(0.5), m.Carried(0.2)), up.StepsBetween(b, 0.5, 0.8),
                1e-9)
        << b;
  EXPECT_DOUBLE_EQ(m.StepsBetween(100, m.Carried(0.4), m.Carried(0.3)), 100);
  // From the origin, the run at 100 counts its steps from its first row (iteration 100).
  EXPECT_DOUBLE_EQ(m.StepsBetween(100, m.Origin(), m.CommonTarget()), 300);
  // The carried state across a batch change, as with the rising metric.
  const double reached = m.MetricAfter(100, m.Carried(0.5), 100);
  EXPECT_NEAR(m.Metric(reached), 0.4, 1e-9);
  EXPECT_NEAR(m.StepsBetween(400, reached, m.CommonTarget()), 100 - (40 + 60.0 / 3), 1e-6);
  // Stated, the mode is taken as stated; the progress reading has no direction.
  EXPECT_FALSE(
      MeasuredSteps::Parse(Falling(), "v", MeasuredSteps::Carry::kMetric, MeasuredSteps::Mode::kMax)
          .negated());
  EXPECT_TRUE(
      MeasuredSteps::Parse(kRuns, "v", MeasuredSteps::Carry::kMetric, MeasuredSteps::Mode::kMin)
          .negated());
  EXPECT_FALSE(MeasuredSteps::Parse(Falling(), "v", MeasuredSteps::Carry::kProgress).negated());
}

// Runs that do not say which way the metric improves are refused, naming what to state.
TEST(MeasuredSteps, AMetricOfNoClearDirectionIsNamed) {
  auto message = [](const std::map<int, std::string>& runs) {
    try {
      MeasuredSteps::Parse(runs, "v.csv");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::map<int, std::string> mixed = kRuns;
  mixed[400] = Falling().at(400);
  EXPECT_EQ(message(mixed),
            "v.csv: metric: cannot tell whether a higher or a lower metric is better (it rises "
            "over the run at batch 100 (v.csv) and falls over the run at batch 400 (v.csv)); set "
            "\"metric_mode\" to \"max\" or \"min\"");
  EXPECT_EQ(message({{64, "iteration,metric\n5,0.3\n9,0.3\n"}}),
            "v.csv: metric: cannot tell whether a higher or a lower metric is better (no run's "
            "metric differs between its first row and its last); set \"metric_mode\" to \"max\" "
            "or \"min\"");
  // Stated, the same runs are read.
  EXPECT_NO_THROW(
      MeasuredSteps::Parse(mixed, "v", MeasuredSteps::Carry::kMetric, MeasuredSteps::Mode::kMax));
  EXPECT_EQ(MeasuredSteps::ParseMode("min", "x"), MeasuredSteps::Mode::kMin);
  try {
    MeasuredSteps::ParseMode("lower", "s.json: metric_mode");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "s.json: metric_mode: 'lower' (expected max or min)");
  }
}

TEST(MeasuredSteps, BadTracesAreNamed) {
  auto message = [](const std::string& text) {
    try {
      MeasuredSteps::Parse({{64, text}}, "v.csv");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(""), "v.csv:1: empty file (no header)");
  EXPECT_EQ(message("progress,metric\n1,2\n"), "v.csv:1: missing column 'iteration'");
  EXPECT_EQ(message("iteration,metric\n"), "v.csv:1: no data rows after the header");
  EXPECT_EQ(message("iteration,metric\n5,0.1\n4,0.2\n"),
            "v.csv:3:1: iteration: 4 is less than the previous row's");
  EXPECT_EQ(message("iteration,metric\n5,abc\n"),
            "v.csv:2:2: metric: 'abc' is not a finite number");
  EXPECT_THROW(MeasuredSteps::Load({{64, "/nonexistent/v.csv"}}), InputError);
}

// The shipped cifar10 runs: the measured truth at a measured batch is the run itself.
TEST(MeasuredSteps, PolluxCifar10) {
  const std::string dir = std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/cifar10/";
  std::map<int, std::string> runs;
  for (int b : {128, 256, 512, 1024, 2048, 4096})
    runs[b] = dir + "validation-" + std::to_string(b) + ".csv";
  const MeasuredSteps m = MeasuredSteps::Load(runs);
  const double target = m.CommonTarget();
  EXPECT_GT(target, 0.9);
  // Larger batches need fewer steps, and within the measured range every batch reaches it.
  double prev = 1e300;
  for (int b : m.batches()) {
    const double s = m.StepsBetween(b, 0, target);
    EXPECT_GT(s, 0) << b;
    EXPECT_LT(s, prev) << b;
    prev = s;
  }
  EXPECT_LE(m.StepsBetween(4096, 0, target), 2011);  // the run at 4096 took 2011 steps in all
}

}  // namespace
}  // namespace cloudtune::replay
