// Synthetic throughput traces for the benchmarks (bench_fit, bench_fit_memory): configurations
// with known ground-truth step and sync times and 5% log-normal noise, fixed seed.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "estimator/core/trace.h"

namespace cloudtune::bench {
namespace detail {

// The ground truth of both generators (5% log-normal noise on step and sync time): compute
// 0.01 s + 0.4 ms/sample, an all-reduce that grows with log(R/2) and GPUs per machine, and a
// smooth overlap of the two.
inline core::Measurement Measure(const core::ConfigKey& k, std::mt19937* rng) {
  std::normal_distribution<double> noise(0.0, 0.05);
  const double gpn = double(k.num_replicas) / k.num_nodes;
  const double tc = 0.01 + 4e-4 * k.local_bsz;
  double tn = 0;
  if (k.num_replicas > 1)
    tn = k.num_nodes == 1 ? 0.005 + 0.002 * (k.num_replicas - 2)
                          : 0.05 + 0.01 * std::log(k.num_replicas / 2.0) +
                                0.02 * (gpn - 1.0) / (k.num_nodes - 1);
  const double t = std::pow(std::pow(tc, 2.0) + std::pow(tn, 2.0), 0.5);
  core::Measurement m;
  m.key = k;
  m.step_time = (k.accum_steps * tc + t) * std::exp(noise(*rng));
  m.sync_time = std::max(0.0, t - tc) * std::exp(noise(*rng));
  m.sync_time = std::min(m.sync_time, 0.9 * m.step_time);
  m.rows = 1;
  return m;
}

}  // namespace detail

// The configurations span 1-16 machines of up to 4 GPUs and 16 batch sizes, like the Pollux
// traces; beyond 8 * 4 * 16 keys they repeat with more accumulation steps.
inline std::vector<core::Measurement> Synthetic(int n) {
  using core::ConfigKey;
  using core::Measurement;
  std::mt19937 rng(42);
  const int nodes_list[] = {1, 2, 3, 4, 6, 8, 12, 16};
  std::vector<Measurement> out;
  for (int i = 0; out.size() < static_cast<size_t>(n); ++i) {
    ConfigKey k;
    k.num_nodes = nodes_list[(i * 7) % 8];
    const int gpn = 1 + (i / 8) % 4;
    k.num_replicas = k.num_nodes * gpn;
    k.local_bsz = static_cast<int>(std::round(32 * std::pow(1.25, (i / 3) % 16)));
    k.accum_steps = 0;
    for (const auto& m : out)  // repeated keys get more accumulation steps: all distinct
      if (m.key == k) k.accum_steps = std::max(k.accum_steps, m.key.accum_steps + 1);
    out.push_back(detail::Measure(k, &rng));
  }
  return out;
}

// The adversarial case for the model's random effects, whose number grows with n: n distinct
// configurations without accumulation steps, spread over the 512 placements of 1-64 machines of
// 1-8 GPUs and over clamp(n / 10, 8, 300) distinct batch sizes round(16 * 1.02^k) (16 to ~6,500).
// Same ground truth and noise (5% log-normal, fixed seed) as Synthetic.
inline std::vector<core::Measurement> Distinct(int n) {
  using core::ConfigKey;
  using core::Measurement;
  std::mt19937 rng(43);
  const int num_batches = std::clamp(n / 10, 8, 300);
  std::vector<int> batches;
  for (int k = 0; static_cast<int>(batches.size()) < num_batches; ++k) {
    const int b = static_cast<int>(std::round(16 * std::pow(1.02, k)));
    if (batches.empty() || b != batches.back()) batches.push_back(b);
  }
  constexpr int kPlacements = 64 * 8;
  std::set<ConfigKey> seen;
  std::vector<Measurement> out;
  for (long long i = 0; out.size() < static_cast<size_t>(n); ++i) {
    const int p = static_cast<int>((i * 211) % kPlacements);  // 211 is coprime with 512
    ConfigKey k;
    k.num_nodes = 1 + p % 64;
    const int gpn = 1 + p / 64;
    k.num_replicas = k.num_nodes * gpn;
    k.local_bsz = batches[i % num_batches];
    k.accum_steps = 0;
    if (!seen.insert(k).second) continue;
    out.push_back(detail::Measure(k, &rng));
  }
  return out;
}

}  // namespace cloudtune::bench
