// Fit time of the throughput model (estimator/throughput.h) on 10, 100 and 1,000 configurations.
// The configurations are synthetic (known parameters, 5% log-normal noise, fixed seed) and span
// 1-16 machines of up to 4 GPUs and 16 batch sizes, like the Pollux traces
// (bench/synthetic_trace.h).
#include <benchmark/benchmark.h>

#include <vector>

#include "bench/synthetic_trace.h"
#include "estimator/throughput.h"

namespace {

using cloudtune::bench::Synthetic;

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
