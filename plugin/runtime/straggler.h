// Straggler detection: every K steps the plugin gathers each rank's mean compute (and step) time
// over the job's own process group and hands the vector to a StragglerDetector on rank 0. A rank is
// a straggler when its compute time exceeds the median of the others by more than `threshold` in at
// least `min_hits` of the last `windows` windows — one slow window (noise, a GC pause) is not
// enough. The detector yields a `straggler` record with the evidence and a slowdown factor the
// search can use (in synchronous data parallelism the slowest worker sets the pace).
#pragma once

#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cloudtune::runtime {

struct StragglerOptions {
  // Relative excess over the median of the other ranks' compute time that counts as slow
  // (0.15 = 15% slower). > 0.
  double threshold = 0.15;
  // Absolute floor (seconds): a rank is slow only if it exceeds the median by at least this much,
  // so microsecond-scale jitter on tiny steps is ignored. >= 0.
  double min_excess_seconds = 0.0005;
  // Sliding window of the last `windows` gathers (n). >= 1.
  int windows = 8;
  // Slow in at least `min_hits` of them (m), 1 <= m <= n.
  int min_hits = 6;
  // Gather every K steps (CLOUDTUNE_STRAGGLER_EVERY); used by the plugin, recorded in the evidence.
  int every_steps = 50;
  bool IsValid(std::string* error) const;
};

// One window: per-rank mean times over the last K steps, index = rank. Seconds.
struct RankWindow {
  long long step = 0;                // optimizer step at the end of the window
  std::vector<double> compute_time;  // per-rank compute seconds per step (required)
  std::vector<double> step_time;     // per-rank step seconds (optional; empty = unknown)
};

struct StragglerReport {
  int rank = -1;
  int hits = 0;                       // slow windows among the last `windows`
  int windows = 0;                    // windows considered
  double ratio = 1;                   // mean over the slow windows: rank compute / median of others
  double factor = 1;                  // slowdown of the job: slowest compute / median compute
  std::vector<double> recent_ratios;  // per window, oldest first
  std::vector<long long> steps;       // the windows' end steps, oldest first
  std::vector<double> last_compute_time;  // last window, all ranks
  nlohmann::json ToJson()
      const;  // the `straggler` sidecar record ("schema":"cloudtune.straggler/1")
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {});

  // Adds one window. Returns one report per rank that *becomes* a straggler (once per episode; a
  // rank that recovers — fewer than min_hits slow windows — may be reported again later). Windows
  // whose rank count differs from the previous ones (the job was resized) reset the history.
  // Invalid values (negative, non-finite) make the window ignored.
  std::vector<StragglerReport> AddWindow(const RankWindow& w);

  // Ranks currently flagged as stragglers.
  std::vector<int> Stragglers() const;
  // Expected slowdown due to the flagged stragglers: slowest flagged rank's compute time over the
  // median compute time in the last window; 1 when none is flagged.
  double Factor() const;

 private:
  StragglerOptions options_;
  int num_ranks_ = 0;
  std::deque<RankWindow> history_;
  std::deque<std::vector<double>> ratios_;  // per window, per rank: compute / median of others
  std::vector<bool> flagged_;
};

}  // namespace cloudtune::runtime
