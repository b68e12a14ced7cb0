// Fit time of the throughput model (estimator/throughput.h) on 10, 100 and 1,000 configurations,
// and of the model over three instance types (estimator/throughput_types.h) on 1,000.
// The configurations are synthetic (known parameters, 5% log-normal noise, fixed seed) and span
// 1-16 machines of up to 4 GPUs and 16 batch sizes, like the Pollux traces
// (bench/synthetic_trace.h).
#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

#include "bench/synthetic_trace.h"
#include "estimator/throughput.h"
#include "estimator/throughput_types.h"

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

// One model over three instance types: range(0) configurations split evenly between them (the
// second and third type: the same job on a GPU 1.5x and 2x faster, whose step times are the
// first's divided by those factors), with the catalog's hardware of each.
void BM_FitCrossType(benchmark::State& state) {
  using cloudtune::estimator::Hardware;
  auto data = Synthetic(static_cast<int>(state.range(0)));
  const char* types[] = {"t1", "t2", "t3"};
  const double speed[] = {1.0, 1.5, 2.0};
  for (size_t i = 0; i < data.size(); ++i) {
    const int k = static_cast<int>(i % 3);
    data[i].key.instance_type = types[k];
    data[i].step_time /= speed[k];
    data[i].sync_time /= speed[k];
  }
  std::map<std::string, Hardware> hw;
  for (int k = 0; k < 3; ++k) {
    Hardware h;
    h.gpu_tflops = 10 * speed[k];
    h.memory_bandwidth_gbs = 300 * speed[k];
    h.network_gbps = 25 * speed[k];
    hw[types[k]] = h;
  }
  for (auto _ : state) {
    auto model = cloudtune::estimator::FitCrossType(data, hw);
    benchmark::DoNotOptimize(model);
  }
  state.counters["configs"] = static_cast<double>(data.size());
}
BENCHMARK(BM_FitCrossType)->Arg(1000)->Unit(benchmark::kMillisecond);

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
