// Peak heap of the throughput fit (estimator/throughput.h) relative to its input: checks the
// requirement "a fit never holds more than a small multiple of its input". Not Google Benchmark:
// a plain program that interposes the C allocation functions in this executable (the shared
// libraries, Ceres and cholmod included, resolve malloc to these definitions, and libstdc++'s
// operator new calls malloc), counts the live bytes (malloc_usable_size of each block) and their
// peak during each FitThroughput call. Cases: bench/synthetic_trace.h's Synthetic (Pollux-like,
// a bounded set of effects) and Distinct (the adversarial case: the effects grow with n).
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/synthetic_trace.h"
#include "estimator/throughput.h"

// ---- heap tracking ---------------------------------------------------------------------------
extern "C" {
void* __libc_malloc(size_t size);
void __libc_free(void* p);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}

namespace {

std::atomic<long long> g_live{0};  // live heap bytes (usable sizes)
std::atomic<long long> g_peak{0};  // peak of g_live since the last ResetPeak()

void Added(void* p) {
  if (p == nullptr) return;
  const long long live =
      g_live.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed) +
      static_cast<long long>(malloc_usable_size(p));
  long long peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void Removed(void* p) {
  if (p == nullptr) return;
  g_live.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
}

long long LiveBytes() { return g_live.load(std::memory_order_relaxed); }
long long PeakBytes() { return g_peak.load(std::memory_order_relaxed); }
void ResetPeak() { g_peak.store(LiveBytes(), std::memory_order_relaxed); }

}  // namespace

extern "C" {

void* malloc(size_t size) noexcept {
  void* p = __libc_malloc(size);
  Added(p);
  return p;
}

void free(void* p) noexcept {
  Removed(p);
  __libc_free(p);
}

void* calloc(size_t n, size_t size) noexcept {
  void* p = __libc_calloc(n, size);
  Added(p);
  return p;
}

void* realloc(void* p, size_t size) noexcept {
  const long long old = p == nullptr ? 0 : static_cast<long long>(malloc_usable_size(p));
  void* q = __libc_realloc(p, size);
  if (q == nullptr && size != 0) return q;           // failed: p is still live
  g_live.fetch_sub(old, std::memory_order_relaxed);  // moved, or freed (size 0)
  Added(q);
  return q;
}

int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return 22;  // EINVAL
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr && size != 0) return 12;  // ENOMEM
  Added(p);
  *out = p;
  return 0;
}

void* aligned_alloc(size_t alignment, size_t size) noexcept {
  void* p = __libc_memalign(alignment, size);
  Added(p);
  return p;
}

void* memalign(size_t alignment, size_t size) noexcept {
  void* p = __libc_memalign(alignment, size);
  Added(p);
  return p;
}

}  // extern "C"

// ---- the benchmark ---------------------------------------------------------------------------
namespace {

using cloudtune::core::Measurement;
using cloudtune::estimator::kNumThroughputParams;

struct Row {
  std::string name;
  int n = 0;
  long long peak = 0, input = 0;
  double seconds = 0;
  double ratio() const { return static_cast<double>(peak) / static_cast<double>(input); }
  double per_config() const { return static_cast<double>(peak) / n; }
};

Row Measure(const char* name, const std::vector<Measurement>& data) {
  Row r;
  r.name = name;
  r.n = static_cast<int>(data.size());
  r.input = static_cast<long long>(data.size() * sizeof(Measurement));
  const long long before = LiveBytes();
  ResetPeak();
  const auto t0 = std::chrono::steady_clock::now();
  long long effects = 0;
  {
    const auto model = cloudtune::estimator::FitThroughput(data);
    r.peak = PeakBytes() - before;
    effects = static_cast<long long>(model.theta().size()) - kNumThroughputParams;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%-9s %6d %7lld %15lld %11lld %7.1f %16.0f %8.3f\n", name, r.n, effects, r.peak,
              r.input, r.ratio(), r.per_config(), r.seconds);
  std::fflush(stdout);
  return r;
}

}  // namespace

int main() {
  std::printf(
      "# peak_heap_bytes = peak of live heap bytes during FitThroughput (default options)\n");
  std::printf(
      "#   minus the live bytes just before it; input_bytes = n * sizeof(Measurement) = n * %zu;\n",
      sizeof(Measurement));
  std::printf(
      "#   ratio = peak_heap_bytes / input_bytes; bytes_per_config = peak_heap_bytes / n\n");
  std::printf("%-9s %6s %7s %15s %11s %7s %16s %8s\n", "case", "n", "effects", "peak_heap_bytes",
              "input_bytes", "ratio", "bytes_per_config", "seconds");
  std::vector<Row> synthetic, distinct;
  for (int n : {100, 1000, 10000})
    synthetic.push_back(Measure("Synthetic", cloudtune::bench::Synthetic(n)));
  for (int n : {100, 1000, 4000})
    distinct.push_back(Measure("Distinct", cloudtune::bench::Distinct(n)));
  auto max_ratio = [](const std::vector<Row>& rows) {
    double m = 0;
    for (const auto& r : rows) m = std::max(m, r.ratio());
    return m;
  };
  auto growth = [](const std::vector<Row>& rows) {
    return rows.back().per_config() / rows.front().per_config();
  };
  std::printf(
      "verdict: max ratio Synthetic %.1f, Distinct %.1f; bytes_per_config growth Synthetic "
      "n=%d->%d x%.2f, Distinct n=%d->%d x%.2f (flat = linear memory)\n",
      max_ratio(synthetic), max_ratio(distinct), synthetic.front().n, synthetic.back().n,
      growth(synthetic), distinct.front().n, distinct.back().n, growth(distinct));
  return 0;
}
