// Search over the embedded catalog: >= 100,000 candidates (type × nodes × GPUs/node × local batch
// × accumulation × purchase) with a cheap analytical predictor.
#include <benchmark/benchmark.h>

#include <cmath>

#include "search/search.h"

namespace cs = cloudtune::search;

static void BM_Search(benchmark::State& state) {
  const cs::Catalog& catalog = cs::DefaultCatalog();
  cs::SearchProblem p;
  p.catalog = &catalog;
  p.predictor.step_time = [](const cs::InstanceType& t, const cs::Config& c) {
    const double compute =
        (0.01 + 0.002 * c.local_bsz) * 8.0 / (4.0 + t.gpus) * (c.accum_steps + 1);
    const double sync = c.replicas() > 1 ? 0.02 + 0.002 * c.replicas() * (c.nodes > 1 ? 4 : 1) : 0;
    return cs::Estimate{compute + sync, 0.1};
  };
  p.predictor.steps = [](double b) {
    const double s = b / 64, r = 4000.0 / 64;
    return cs::Estimate{1e5 * (r / s + 1) / (r + 1), 0.05};
  };
  p.space.max_nodes = static_cast<int>(state.range(0));
  p.space.max_gpus = 128;
  p.space.min_local_bsz = 8;
  p.space.max_local_bsz = 512;
  p.space.max_accum_steps = 3;
  p.remaining_progress = 1e5;
  p.objective.deadline_h = 50;
  size_t evaluated = 0;
  for (auto _ : state) {
    cs::SearchResult r = cs::Search(p);
    evaluated = r.evaluated;
    benchmark::DoNotOptimize(r.top.data());
  }
  state.counters["candidates"] = static_cast<double>(evaluated);
  state.counters["ns_per_candidate"] = benchmark::Counter(
      static_cast<double>(evaluated),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Search)->Arg(7)->Arg(16)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
