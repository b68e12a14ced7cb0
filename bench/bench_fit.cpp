// Fit time of the throughput model (estimator/throughput.h) on 10, 100 and 1,000 configurations.
// The configurations are synthetic (known parameters, 5% log-normal noise, fixed seed) and span
// 1-16 machines of up to 4 GPUs and 16 batch sizes, like the Pollux traces.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "estimator/throughput.h"

namespace {

using cloudtune::estimator::ConfigKey;
using cloudtune::estimator::Measurement;

std::vector<Measurement> Synthetic(int n) {
  std::mt19937 rng(42);
  std::normal_distribution<double> noise(0.0, 0.05);
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
    const double tc = 0.01 + 4e-4 * k.local_bsz;
    double tn = 0;
    if (k.num_replicas > 1)
      tn = k.num_nodes == 1 ? 0.005 + 0.002 * (k.num_replicas - 2)
                            : 0.05 + 0.01 * std::log(k.num_replicas / 2.0) +
                                  0.02 * (gpn - 1.0) / (k.num_nodes - 1);
    const double t = std::pow(std::pow(tc, 2.0) + std::pow(tn, 2.0), 0.5);
    Measurement m;
    m.key = k;
    m.step_time = (k.accum_steps * tc + t) * std::exp(noise(rng));
    m.sync_time = std::max(0.0, t - tc) * std::exp(noise(rng));
    m.sync_time = std::min(m.sync_time, 0.9 * m.step_time);
    m.rows = 1;
    out.push_back(m);
  }
  return out;
}

// range(1) = 1: with the covariance (log_sigma, identified flags), the default; 0: without.
void BM_FitThroughput(benchmark::State& state) {
  const auto data = Synthetic(static_cast<int>(state.range(0)));
  cloudtune::estimator::ThroughputFitOptions options;
  options.compute_uncertainty = state.range(1) != 0;
  int iterations = 0;
  for (auto _ : state) {
    auto model = cloudtune::estimator::FitThroughput(data, options);
    iterations = model.stats().iterations;
    benchmark::DoNotOptimize(model);
  }
  state.counters["configs"] = static_cast<double>(data.size());
  state.counters["solver_iterations"] = iterations;
}
BENCHMARK(BM_FitThroughput)
    ->Args({10, 1})
    ->Args({100, 1})
    ->Args({1000, 1})
    ->Args({1000, 0})
    ->Unit(benchmark::kMillisecond);

void BM_Predict(benchmark::State& state) {
  const auto data = Synthetic(200);
  const auto model = cloudtune::estimator::FitThroughput(data);
  size_t i = 0;
  for (auto _ : state) {
    auto p = model.Predict(data[i++ % data.size()].key);
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_Predict);

}  // namespace

BENCHMARK_MAIN();
