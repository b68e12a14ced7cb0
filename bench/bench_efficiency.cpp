// Fit time of the efficiency drift model (estimator/efficiency.h) on 200, 2,000 and 20,000
// observations at two batch sizes (synthetic: known drift, 10% log-normal noise, fixed seed), and
// the time of one steps prediction and one batch-size recommendation.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "estimator/batch_size.h"
#include "estimator/efficiency.h"

namespace {

using namespace cloudtune::estimator;

std::vector<NoiseObservation> Synthetic(int n) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 0.1);
  std::vector<NoiseObservation> out;
  for (int i = 0; i < n; ++i) {
    const double b = i % 2 ? 256 : 128, p = 40000.0 * (i / 2) / (n / 2);
    const double rho0 = std::log(1 + p / 100), d = 0.5 + p / 20000;
    const double e = std::exp(-d), s = b / 128;
    const double r = std::exp(rho0) / (e + (1 - e) * std::pow(s, -0.8));
    out.push_back({b, p, 0, 1.0, r * std::exp(noise(rng))});
  }
  return out;
}

void BM_FitEfficiency(benchmark::State& state) {
  auto obs = Synthetic(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(FitEfficiency(obs));
}
BENCHMARK(BM_FitEfficiency)->Arg(200)->Arg(2000)->Arg(20000)->Unit(benchmark::kMillisecond);

void BM_StepsToProgress(benchmark::State& state) {
  EfficiencyModel m = FitEfficiency(Synthetic(2000));
  for (auto _ : state) benchmark::DoNotOptimize(m.StepsToProgress(4096, 0, 40000));
}
BENCHMARK(BM_StepsToProgress)->Unit(benchmark::kMicrosecond);

void BM_RecommendBatch(benchmark::State& state) {
  EfficiencyModel m = FitEfficiency(Synthetic(2000));
  BatchSizeOptions o;
  o.max_local_batch = 1024;
  BatchSizeController c(o);
  auto fn = [](int b, int a) { return (a + 1) * (0.02 + 0.001 * b) + 0.05; };
  for (auto _ : state) benchmark::DoNotOptimize(c.Recommend(8, fn, m, 20000, 32, 0));
}
BENCHMARK(BM_RecommendBatch)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
