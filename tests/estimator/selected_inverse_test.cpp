#include "estimator/detail/selected_inverse.h"

#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <random>
#include <vector>

namespace cloudtune::estimator::detail {
namespace {

using Sparse = Eigen::SparseMatrix<double>;

// A random sparse symmetric positive definite matrix: `links` random off-diagonal pairs plus an
// "arrow" (every row coupled to the first `hubs` rows, like effects coupled through the core), made
// diagonally dominant.
Sparse RandomSpd(int n, int links, int hubs, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, n - 1);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<Eigen::Triplet<double>> t;
  std::vector<double> row_sum(n, 0.0);
  auto add = [&](int i, int j, double v) {
    if (i == j) return;
    t.emplace_back(std::max(i, j), std::min(i, j), v);  // lower triangle only
    row_sum[i] += std::abs(v);
    row_sum[j] += std::abs(v);
  };
  for (int k = 0; k < links; ++k) add(pick(rng), pick(rng), value(rng));
  for (int h = 0; h < hubs; ++h)
    for (int i = h + 1; i < n; ++i) add(i, h, value(rng));
  for (int i = 0; i < n; ++i) t.emplace_back(i, i, row_sum[i] + 0.5 + std::abs(value(rng)));
  Sparse a(n, n);
  a.setFromTriplets(t.begin(), t.end());
  return a;
}

void ExpectMatchesDenseInverse(const Sparse& lower) {
  SelectedInverse::Ldlt ldlt(lower);
  ASSERT_EQ(ldlt.info(), Eigen::Success);
  const SelectedInverse sel(ldlt);
  const Eigen::MatrixXd full = Eigen::MatrixXd(lower).selfadjointView<Eigen::Lower>();
  const Eigen::MatrixXd inv = full.inverse();
  int checked = 0;
  for (int j = 0; j < lower.outerSize(); ++j)
    for (Sparse::InnerIterator it(lower, j); it; ++it) {
      const int i = static_cast<int>(it.row());
      EXPECT_NEAR(sel(i, j), inv(i, j), 1e-10 * (1 + std::abs(inv(i, j)))) << i << "," << j;
      EXPECT_DOUBLE_EQ(sel(i, j), sel(j, i));
      ++checked;
    }
  EXPECT_GE(checked, lower.cols());
}

TEST(SelectedInverse, MatchesTheDenseInverseOnThePattern) {
  ExpectMatchesDenseInverse(RandomSpd(60, 120, 0, 1));   // scattered links: fill-in
  ExpectMatchesDenseInverse(RandomSpd(120, 200, 3, 2));  // plus an arrow of 3 hubs
  ExpectMatchesDenseInverse(RandomSpd(200, 50, 1, 3));   // sparse, nearly a forest
}

TEST(SelectedInverse, DiagonalAndOneByOne) {
  Sparse d(3, 3);
  d.insert(0, 0) = 2;
  d.insert(1, 1) = 4;
  d.insert(2, 2) = 0.5;
  SelectedInverse::Ldlt ldlt(d);
  const SelectedInverse sel(ldlt);
  EXPECT_DOUBLE_EQ(sel(0, 0), 0.5);
  EXPECT_DOUBLE_EQ(sel(1, 1), 0.25);
  EXPECT_DOUBLE_EQ(sel(2, 2), 2.0);
  ExpectMatchesDenseInverse(RandomSpd(1, 0, 0, 4));
}

}  // namespace
}  // namespace cloudtune::estimator::detail
