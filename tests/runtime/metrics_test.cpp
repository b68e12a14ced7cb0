#include "plugin/runtime/metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

using cloudtune::runtime::MetricsSnapshot;
using cloudtune::runtime::RenderPrometheus;

TEST(Metrics, EmptySnapshotRendersNothing) { EXPECT_EQ(RenderPrometheus(MetricsSnapshot{}), ""); }

TEST(Metrics, KnownValuesHaveHelpTypeAndSample) {
  MetricsSnapshot m;
  m.step_time_seconds = 0.125;
  m.throughput = 2048;
  m.goodput = 1500.5;
  m.noise_scale = 1e6;
  m.predicted_cost_rate_usd_per_hour = 3.06;
  m.refits_total = 4;
  const std::string text = RenderPrometheus(m);
  EXPECT_NE(text.find("# HELP cloudtune_step_time_seconds "), std::string::npos);
  EXPECT_NE(
      text.find("# TYPE cloudtune_step_time_seconds gauge\ncloudtune_step_time_seconds 0.125\n"),
      std::string::npos);
  EXPECT_NE(text.find("# TYPE cloudtune_refits_total counter\ncloudtune_refits_total 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("cloudtune_predicted_cost_rate_usd_per_hour 3.0600000000000001"),
            std::string::npos);
  EXPECT_EQ(text.find("cloudtune_sync_time_seconds"), std::string::npos);  // unknown: omitted
  // Every line is a comment or "name value" in the text format grammar.
  std::istringstream in(text);
  std::string line;
  const std::regex sample(
      R"([a-zA-Z_:][a-zA-Z0-9_:]* [-+0-9.eE]+|[a-zA-Z_:][a-zA-Z0-9_:]* [+-]Inf)");
  const std::regex comment(R"(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+)");
  int samples = 0;
  while (std::getline(in, line)) {
    if (line[0] == '#') {
      EXPECT_TRUE(std::regex_match(line, comment)) << line;
    } else {
      EXPECT_TRUE(std::regex_match(line, sample)) << line;
      ++samples;
    }
  }
  EXPECT_EQ(samples, 6);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Metrics, InfinityAndPrefix) {
  MetricsSnapshot m;
  m.noise_scale = std::numeric_limits<double>::infinity();
  const std::string text = RenderPrometheus(m, "job_");
  EXPECT_NE(text.find("job_gradient_noise_scale_samples +Inf\n"), std::string::npos);
}
