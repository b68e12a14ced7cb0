// Starting values of the throughput fit's all-reduce parameters from the measured sync times:
// the all-reduce time each configuration hides behind its compute, and a least-squares fit of the
// model's smooth forms to those times. A start near the optimum saves Gauss-Newton iterations.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace cloudtune::estimator::detail {

// The all-reduce time T_n of a configuration whose exposed sync time is s and compute time tc, at
// the starting overlap (gamma = 2, omega): s = T_n - softmin(omega tc, T_n), with softmin(a, x) =
// a x / sqrt(a^2 + x^2) at gamma = 2. In u = T_n / a this is h(u) = u - u / sqrt(1 + u^2) = s / a
// =: q, h increasing and convex with u^3 / 2 >= h(u) >= u - 1: the root lies in [cbrt(2 q),
// q + 1], and Newton's method from min(q + 1, cbrt(2 q) + q), above the root, descends onto it.
inline double InvertOverlap(double s, double tc, double omega) {
  const double a = omega * tc, q = s / a, lo = std::cbrt(2.0 * q);
  double u = std::min(q + 1.0, lo + q);
  for (int i = 0; i < 8; ++i) {
    const double u2 = 1.0 + u * u, r = std::sqrt(u2);
    const double h = u - u / r - q, dh = 1.0 - 1.0 / (u2 * r);
    if (!(dh > 0) || h <= 1e-6 * q) break;
    u = std::max(lo, u - h / dh);
  }
  return a * u;
}

// Least squares of t ~ c0 + c1 x1 + c2 x2 in relative terms (residual pred / t - 1) with positive
// coefficients: the best of the subsets of terms that contain c0 and whose solution is positive.
// Dropped terms come back as 0; false when no subset gives a positive c0. Samples without a
// positive, finite t are skipped.
struct LinearSample {
  double x1, x2, t;
};
inline bool FitPositiveLinear(const std::vector<LinearSample>& v, int terms, double c[3]) {
  // Normal equations of all terms, f = (1, x1, x2) / t: A = sum f f', g = sum f; a subset's
  // sum of squares is x' A x - 2 x' g + n.
  Eigen::Matrix3d ata = Eigen::Matrix3d::Zero();
  Eigen::Vector3d atg = Eigen::Vector3d::Zero();
  int used = 0;
  for (const auto& s : v) {
    if (!(s.t > 0) || !std::isfinite(s.t)) continue;  // no all-reduce time to fit
    ++used;
    const Eigen::Vector3d f(1.0 / s.t, s.x1 / s.t, s.x2 / s.t);
    ata.noalias() += f * f.transpose();
    atg += f;
  }
  double best = std::numeric_limits<double>::infinity();
  for (int mask = 0; mask < (1 << (terms - 1)); ++mask) {  // bit k: term k + 1 used
    int idx[3] = {0}, n = 1;
    for (int k = 0; k < terms - 1; ++k)
      if (mask >> k & 1) idx[n++] = k + 1;
    if (used < n) continue;
    Eigen::MatrixXd a(n, n);
    Eigen::VectorXd g(n);
    for (int i = 0; i < n; ++i) {
      g(i) = atg(idx[i]);
      for (int j = 0; j < n; ++j) a(i, j) = ata(idx[i], idx[j]);
    }
    const auto ldlt = a.ldlt();
    if (ldlt.info() != Eigen::Success || !(ldlt.rcond() > 1e-12)) continue;
    const Eigen::VectorXd x = ldlt.solve(g);
    if ((x.array() <= 0).any()) continue;
    const double sse = x.dot(a * x) - 2.0 * x.dot(g) + double(used);
    if (sse < best) {
      best = sse;
      c[0] = c[1] = c[2] = 0;
      for (int i = 0; i < n; ++i) c[idx[i]] = x(i);
    }
  }
  return best < std::numeric_limits<double>::infinity();
}

}  // namespace cloudtune::estimator::detail
