// Search over the embedded catalog: >= 100,000 candidates (type × nodes × GPUs/node × local batch
// × accumulation × purchase) with a cheap analytical predictor.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "search/mixed.h"
#include "search/search.h"

namespace cs = cloudtune::search;

static cs::SearchProblem AnalyticalProblem(int max_nodes) {
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
  p.space.max_nodes = max_nodes;
  p.space.max_gpus = 128;
  p.space.min_local_bsz = 8;
  p.space.max_local_bsz = 512;
  p.space.max_accum_steps = 3;
  p.remaining_progress = 1e5;
  p.objective.deadline_h = 50;
  return p;
}

static void BM_Search(benchmark::State& state) {
  const cs::SearchProblem p = AnalyticalProblem(static_cast<int>(state.range(0)));
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

// The same search when the batch growth bound (4x an observed batch of 64) keeps every candidate
// from meeting the deadline and a larger batch would meet it: the search then also evaluates the
// candidates beyond the bound (the plan) and the plan's instances within it (the step).
static void BM_SearchTowardAPlan(benchmark::State& state) {
  cs::SearchProblem p = AnalyticalProblem(16);
  cs::Config cur;
  cur.type = "g4dn.xlarge";
  cur.local_bsz = 64;
  p.current = &cur;
  p.space.observed_batch = 64;
  p.objective.deadline_h = 0;
  p.objective.goal = cs::Goal::kTime;
  const double bounded_h = cs::Search(p).top[0].hours;
  p.space.max_batch_growth = 0;
  const double unbounded_h = cs::Search(p).top[0].hours;
  p.space.max_batch_growth = 4;
  p.objective.goal = cs::Goal::kCost;
  p.objective.deadline_h = std::sqrt(bounded_h * unbounded_h);
  if (!cs::Search(p).has_plan) {
    state.SkipWithError("no plan beyond the growth bound in this problem");
    return;
  }
  for (auto _ : state) {
    cs::SearchResult r = cs::Search(p);
    benchmark::DoNotOptimize(r.top.data());
  }
}
BENCHMARK(BM_SearchTowardAPlan)->Unit(benchmark::kMillisecond);

// One search with mixed clusters over the whole catalog: the single-type search (16 machines, local
// batch <= 64: a large batch needs many GPUs) and then SearchMixed with up to three types per
// cluster, the preferred type's capacity cut to half of what its best candidate wants and 4 nodes
// of every other type. The same analytical
// workload; a mixed cluster's compute is balanced analytically (all parts finish together).
static void BM_SearchWithMixed(benchmark::State& state) {
  const cs::Catalog& catalog = cs::DefaultCatalog();
  auto per_sample = [&catalog](const std::string& type) {
    const int i = catalog.Find(type);
    const double tflops = cs::InstanceTflops(catalog, catalog.types[i]) / catalog.types[i].gpus;
    return 0.002 * 65.0 / (tflops > 0 ? tflops : 30.0);
  };
  cs::SearchProblem p;
  p.catalog = &catalog;
  p.predictor.step_time = [&](const cs::InstanceType& t, const cs::Config& c) {
    const double compute = (0.01 + per_sample(t.name) * c.local_bsz) * (c.accum_steps + 1);
    const double sync = c.replicas() > 1 ? 0.02 + 0.0005 * c.replicas() * (c.nodes > 1 ? 2 : 1) : 0;
    return cs::Estimate{compute + sync, 0.1};
  };
  p.predictor.steps = [](double b) {
    const double s = b / 64, r = 4000.0 / 64;
    return cs::Estimate{1e5 * (r / s + 1) / (r + 1), 0.05};
  };
  p.space.max_nodes = 16;
  p.space.max_gpus = 128;
  p.space.max_local_bsz = 64;  // memory-bound: a large batch needs many GPUs
  p.space.max_accum_steps = 0;
  p.remaining_progress = 1e5;
  p.objective.goal = cs::Goal::kTime;
  p.keep_top = 16;
  const cs::MixedStepFn mixed = [&](const cs::MixedConfig& c) {
    double inv = 0;
    for (const auto& part : c.parts) inv += part.replicas() / per_sample(part.type);
    const double t = 0.01 + c.global_batch / inv;
    cs::MixedStep s;
    for (const auto& part : c.parts)
      s.local_bsz.push_back(std::max(1, static_cast<int>((t - 0.01) / per_sample(part.type))));
    s.global_batch = c.global_batch;
    s.step = {t + 0.02 + 0.001 * c.replicas(), 0.12};
    return s;
  };
  size_t single = 0, considered = 0;
  bool proposed = false;
  for (auto _ : state) {
    const cs::SearchResult r = cs::Search(p);
    cs::MixedSearchOptions o;
    o.max_types = 3;
    for (const auto& t : catalog.types) o.available_nodes[t.name] = 4;
    o.available_nodes[r.top.front().config.type] = std::max(1, r.top.front().config.nodes / 2);
    cs::MixedSearchResult m = cs::SearchMixed(p, r, mixed, o);  // not const: see DoNotOptimize
    single = r.evaluated;
    considered = m.considered;
    proposed = m.proposed;
    benchmark::DoNotOptimize(m.best);
  }
  state.counters["single_candidates"] = static_cast<double>(single);
  state.counters["mixed_candidates"] = static_cast<double>(considered);
  state.counters["mixed_proposed"] = proposed;
}
BENCHMARK(BM_SearchWithMixed)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
