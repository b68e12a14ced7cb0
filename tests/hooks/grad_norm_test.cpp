#include "hooks/grad_norm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

namespace cloudtune::hooks {
namespace {

double Reference(const std::vector<at::Tensor>& ts) {
  double s = 0;
  for (const auto& t : ts) s += t.to(at::kDouble).square().sum().item<double>();
  return s;
}

TEST(GradNorm, KernelMatchesReferenceOnOddSizes) {
  for (int64_t n : {0, 1, 15, 16, 17, 4095, 4096, 4097, 100003}) {
    at::Tensor t = at::randn({n});
    EXPECT_NEAR(SumSquares(t.data_ptr<float>(), n), Reference({t}), 1e-6 * (1 + Reference({t})))
        << n;
    // The fused pass over the same sizes: both sums, the tails short of the prefetch included.
    at::Tensor u = at::randn({n});
    double sqr = 0, dot = 0;
    SumSquaresAndDot(t.data_ptr<float>(), u.data_ptr<float>(), n, &sqr, &dot);
    const double ref_dot = (t.to(at::kDouble) * u.to(at::kDouble)).sum().item<double>();
    EXPECT_NEAR(sqr, Reference({t}), 1e-6 * (1 + Reference({t}))) << n;
    EXPECT_NEAR(dot, ref_dot, 1e-6 * (1 + Reference({t, u}))) << n;
  }
}

TEST(GradNorm, OnePassOverManyTensorsOfMixedKinds) {
  std::vector<at::Tensor> ts = {at::randn({3, 5}),           at::randn({7}), at::Tensor(),
                                at::randn({4, 6}).t(),        // strided
                                at::randn({9}, at::kDouble),  // other dtype
                                at::randn({2, 2, 2})};
  const double ref = Reference({ts[0], ts[1], ts[3], ts[4], ts[5]});
  EXPECT_NEAR(SquaredNorm(ts), ref, 1e-6 * ref);
}

TEST(GradNorm, NonFiniteValuesPropagate) {
  at::Tensor t = at::ones({10});
  t[3] = NAN;
  EXPECT_TRUE(std::isnan(SquaredNorm(t)));
}

TEST(GradNorm, DotWithPreviousStep) {
  std::vector<float> prev;
  at::Tensor a = at::randn({1000}), b = at::randn({1000});
  double sqr = 0, dot = 0;
  EXPECT_FALSE(SquaredNormAndDotWithPrevious({a}, &prev, &sqr, &dot));
  EXPECT_NEAR(sqr, Reference({a}), 1e-6 * Reference({a}));  // float lanes: relative error
  EXPECT_TRUE(SquaredNormAndDotWithPrevious({b.narrow(0, 0, 400), b.narrow(0, 400, 600)}, &prev,
                                            &sqr, &dot));
  EXPECT_NEAR(sqr, Reference({b}), 1e-6 * Reference({b}));
  EXPECT_NEAR(dot, (a.to(at::kDouble) * b.to(at::kDouble)).sum().item<double>(),
              1e-6 * Reference({a, b}));
  // A size change starts over.
  EXPECT_FALSE(SquaredNormAndDotWithPrevious({at::randn({10})}, &prev, &sqr, &dot));
}

}  // namespace
}  // namespace cloudtune::hooks
