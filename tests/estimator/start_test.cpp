#include "estimator/detail/start.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace cloudtune::estimator::detail {
namespace {

// Exposed sync time of an all-reduce of tn behind a compute of tc at gamma = 2 (the forward model
// that InvertOverlap inverts).
double Exposed(double tn, double tc, double omega) {
  const double a = omega * tc;
  return tn - a * tn / std::sqrt(a * a + tn * tn);
}

TEST(OverlapStart, InvertsTheExposedSyncTimeOverSixDecades) {
  // From an all-reduce almost fully hidden (exposed ~ tn^3 / 2a^2) to one far longer than the
  // compute (exposed ~ tn - a).
  for (double tn : {1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3, 1.0, 10.0, 100.0}) {
    for (double tc : {0.02, 0.1, 0.5}) {
      const double s = Exposed(tn, tc, 0.7);
      EXPECT_NEAR(InvertOverlap(s, tc, 0.7) / tn, 1.0, 1e-4) << "tn " << tn << " tc " << tc;
    }
  }
}

TEST(OverlapStart, FitsTheSmoothFormAndDropsTermsTheDataDoNotSupport) {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.03);
  std::vector<LinearSample> v;
  for (int r = 3; r <= 64; r += 3)
    for (double x2 : {0.0, 0.5, 1.0}) {
      const double x1 = std::log(r / 2.0);
      v.push_back({x1, x2, (0.05 + 0.01 * x1 + 0.02 * x2) * std::exp(noise(rng))});
    }
  double c[3];
  ASSERT_TRUE(FitPositiveLinear(v, 3, c));
  EXPECT_NEAR(c[0], 0.05, 0.005);
  EXPECT_NEAR(c[1], 0.01, 0.002);
  EXPECT_NEAR(c[2], 0.02, 0.003);

  // A term that would come out negative is dropped (0), not clamped into the others.
  for (auto& s : v) s.t = (0.08 - 0.01 * s.x1) * std::exp(noise(rng));
  ASSERT_TRUE(FitPositiveLinear(v, 2, c));
  EXPECT_EQ(c[1], 0.0);
  EXPECT_GT(c[0], 0.0);

  // Nothing to fit: no samples, or none with a positive, finite time.
  EXPECT_FALSE(FitPositiveLinear({}, 3, c));
  EXPECT_FALSE(FitPositiveLinear({{0.0, 0.0, 0.0}, {1.0, 0.0, std::nan("")}}, 2, c));
  std::vector<LinearSample> exact{
      {0.0, 0.0, 1.0}, {1.0, 0.0, 2.0}, {2.0, 0.0, 3.0}, {3.0, 0.0, 0.0}};
  EXPECT_TRUE(FitPositiveLinear(exact, 2, c));  // t = 1 + x1 (the t = 0 sample skipped)
  EXPECT_NEAR(c[0], 1.0, 1e-9);
  EXPECT_NEAR(c[1], 1.0, 1e-9);
}

}  // namespace
}  // namespace cloudtune::estimator::detail
