// Small robust statistics shared by the fits, the straggler detector and the CLI summaries.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace cloudtune::core {

// Median of `v` (taken by value); `if_empty` when empty. Even counts average the two middle values.
inline double Median(std::vector<double> v, double if_empty = NAN) {
  if (v.empty()) return if_empty;
  const size_t n = v.size(), mid = n / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (n % 2) return hi;
  return 0.5 * (*std::max_element(v.begin(), v.begin() + mid) + hi);
}

// The q-quantile (q in [0, 1]) by linear interpolation between order statistics; NaN when empty.
inline double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// Standard normal cumulative distribution function.
inline double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

}  // namespace cloudtune::core
