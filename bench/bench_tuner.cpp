// Cost of the online tuner's hand-off on the training thread (Tuner::Offer) and of rendering
// /metrics. Run: build/bin/bench_tuner
#include <benchmark/benchmark.h>

#include "plugin/runtime/metrics.h"
#include "plugin/runtime/tuner.h"

using namespace cloudtune::runtime;

namespace {

Snapshot Proto(int configs) {
  Snapshot s;
  s.current = {1, 2, 32, 0, "local"};
  for (int i = 0; i < configs; ++i) {
    cloudtune::core::Measurement m;
    m.key = {1, 1 + i % 4, 16 << (i / 4), 0, "local"};
    m.step_time = 0.1 + 0.01 * i;
    m.sync_time = 0.01;
    m.rows = 50;
    s.profile.push_back(m);
  }
  s.noise = {1.0, 100.0, 32, false};
  return s;
}

TunerResult Fake(const Snapshot& s, const RefitContext&) {
  TunerResult r;
  r.recommendation = {{"step", s.step}};
  r.change_key = "same";
  return r;
}

// The hand-off alone: a prepared snapshot pointer swapped in while the worker refits every ms.
void BM_TunerOffer(benchmark::State& state) {
  TunerOptions o;
  o.refit_seconds = 0.001;
  Tuner t(o, Fake);
  t.Start();
  auto snap = std::make_shared<const Snapshot>(Proto(12));
  for (auto _ : state) t.Offer(snap);
  t.Stop();
}
BENCHMARK(BM_TunerOffer);

// Building the snapshot (copying a profile of N configurations) and handing it off.
void BM_TunerOfferWithCopy(benchmark::State& state) {
  TunerOptions o;
  o.refit_seconds = 0.001;
  Tuner t(o, Fake);
  t.Start();
  const Snapshot proto = Proto(static_cast<int>(state.range(0)));
  for (auto _ : state) t.Offer(std::make_shared<const Snapshot>(proto));
  t.Stop();
}
BENCHMARK(BM_TunerOfferWithCopy)->Arg(12)->Arg(100);

void BM_TunerLatest(benchmark::State& state) {
  Tuner t(TunerOptions{}, Fake);
  for (auto _ : state) benchmark::DoNotOptimize(t.Latest());
}
BENCHMARK(BM_TunerLatest);

void BM_RenderPrometheus(benchmark::State& state) {
  MetricsSnapshot m;
  m.step = 1000;
  m.step_time_seconds = 0.1;
  m.throughput = 1000;
  m.goodput = 800;
  m.noise_scale = 5000;
  m.predicted_cost_rate_usd_per_hour = 3.0;
  m.refits_total = 10;
  for (auto _ : state) benchmark::DoNotOptimize(RenderPrometheus(m));
}
BENCHMARK(BM_RenderPrometheus);

}  // namespace

BENCHMARK_MAIN();
