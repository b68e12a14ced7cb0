// Selected inversion of a sparse symmetric positive definite matrix (Takahashi's recurrences) on
// Eigen's SimplicialLDLT: the entries of A^-1 on the pattern of A, without forming A^-1. Used for
// the effects' posterior covariance of the throughput fit.
#pragma once

#include <Eigen/SparseCholesky>
#include <algorithm>
#include <utility>
#include <vector>

namespace cloudtune::estimator::detail {

// Entries of the inverse of a sparse symmetric positive definite matrix A on the pattern of its
// factor P A P' = L D L' (Takahashi's selected inversion): O(sum over columns of |L(:, j)|^2)
// time and O(nnz(L)) memory instead of one solve per column. The factor's pattern contains A's.
class SelectedInverse {
 public:
  using Ldlt = Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower>;
  explicit SelectedInverse(const Ldlt& ldlt) : l_(ldlt.matrixL().nestedExpression()) {
    l_.makeCompressed();
    perm_ = ldlt.permutationP().indices();
    const Eigen::VectorXd d = ldlt.vectorD();
    const int n = static_cast<int>(l_.cols());
    const int* outer = l_.outerIndexPtr();
    const int* row = l_.innerIndexPtr();
    const double* lx = l_.valuePtr();
    z_.assign(l_.nonZeros(), 0.0);
    diag_.assign(n, 0.0);
    // Z = D^-1 L^-1 + (I - L') Z, from the last column back: Z(i, j) for i in L(:, j)'s pattern
    // needs only Z(i, k) for k in that pattern too, which lie in columns > j.
    for (int j = n - 1; j >= 0; --j) {
      const int b = outer[j], e = outer[j + 1];
      for (int p = b; p < e; ++p) {
        double s = 0;
        for (int q = b; q < e; ++q) s += At(row[p], row[q]) * lx[q];
        z_[p] = -s;
      }
      double s = 0;
      for (int q = b; q < e; ++q) s += lx[q] * z_[q];
      diag_[j] = 1.0 / d[j] - s;
    }
  }
  // (A^-1)(i, j) for (i, j) in the pattern of A.
  double operator()(int i, int j) const { return At(perm_[i], perm_[j]); }

 private:
  // Z(i, j) of the permuted matrix, (i, j) in the factor's pattern.
  double At(int i, int j) const {
    if (i == j) return diag_[i];
    if (i < j) std::swap(i, j);
    const int* row = l_.innerIndexPtr();
    const int* b = row + l_.outerIndexPtr()[j];
    const int* e = row + l_.outerIndexPtr()[j + 1];
    const int* it = std::lower_bound(b, e, i);
    return it != e && *it == i ? z_[it - row] : 0.0;
  }
  Eigen::SparseMatrix<double> l_;
  Eigen::VectorXi perm_;
  std::vector<double> z_, diag_;
};

}  // namespace cloudtune::estimator::detail
