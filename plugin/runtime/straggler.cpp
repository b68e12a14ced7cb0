#include "plugin/runtime/straggler.h"

#include <algorithm>
#include <cmath>

#include "estimator/core/stats.h"

namespace cloudtune::runtime {
namespace {

bool AllFiniteNonNegative(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x) || x < 0) return false;
  return true;
}

}  // namespace

bool StragglerOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!(threshold > 0) || !std::isfinite(threshold))
    return fail("straggler threshold must be > 0, got " + std::to_string(threshold));
  if (!(min_excess_seconds >= 0) || !std::isfinite(min_excess_seconds))
    return fail("straggler min_excess_seconds must be >= 0");
  if (windows < 1) return fail("straggler windows must be >= 1, got " + std::to_string(windows));
  if (min_hits < 1 || min_hits > windows)
    return fail("straggler min_hits must be in [1, windows=" + std::to_string(windows) + "], got " +
                std::to_string(min_hits));
  if (every_steps < 1)
    return fail("straggler every_steps must be >= 1, got " + std::to_string(every_steps));
  return true;
}

nlohmann::json StragglerReport::ToJson() const {
  return {{"schema", "cloudtune.straggler/1"},
          {"rank", rank},
          {"hits", hits},
          {"windows", windows},
          {"ratio", ratio},
          {"factor", factor},
          {"recent_ratios", recent_ratios},
          {"steps", steps},
          {"last_compute_time", last_compute_time}};
}

StragglerDetector::StragglerDetector(StragglerOptions options) : options_(options) {}

std::vector<StragglerReport> StragglerDetector::AddWindow(const RankWindow& w) {
  const int n = static_cast<int>(w.compute_time.size());
  if (n < 2 || !AllFiniteNonNegative(w.compute_time)) return {};
  if (n != num_ranks_) {  // resized job: the old evidence is about other workers
    num_ranks_ = n;
    history_.clear();
    ratios_.clear();
    flagged_.assign(n, false);
  }
  std::vector<double> ratio(n, 1.0);
  std::vector<double> others;
  others.reserve(n - 1);
  for (int r = 0; r < n; ++r) {
    others.clear();
    for (int q = 0; q < n; ++q)
      if (q != r) others.push_back(w.compute_time[q]);
    const double med = core::Median(others, 0.0);
    ratio[r] = med > 0 ? w.compute_time[r] / med : 1.0;
    // A window where the rank does not exceed the absolute floor counts as not slow.
    if (w.compute_time[r] - med < options_.min_excess_seconds) ratio[r] = std::min(ratio[r], 1.0);
  }
  history_.push_back(w);
  ratios_.push_back(std::move(ratio));
  while (static_cast<int>(history_.size()) > options_.windows) {
    history_.pop_front();
    ratios_.pop_front();
  }

  std::vector<StragglerReport> newly;
  for (int r = 0; r < n; ++r) {
    int hits = 0;
    double sum = 0;
    for (const auto& rw : ratios_) {
      if (rw[r] > 1 + options_.threshold) {
        ++hits;
        sum += rw[r];
      }
    }
    const bool slow = hits >= options_.min_hits;
    if (slow && !flagged_[r]) {
      StragglerReport rep;
      rep.rank = r;
      rep.hits = hits;
      rep.windows = static_cast<int>(ratios_.size());
      rep.ratio = sum / hits;
      for (size_t i = 0; i < ratios_.size(); ++i) {
        rep.recent_ratios.push_back(ratios_[i][r]);
        rep.steps.push_back(history_[i].step);
      }
      rep.last_compute_time = w.compute_time;
      newly.push_back(std::move(rep));
    }
    flagged_[r] = slow;
  }
  const double factor = Factor();
  for (auto& rep : newly) rep.factor = factor;
  return newly;
}

std::vector<int> StragglerDetector::Stragglers() const {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(flagged_.size()); ++r)
    if (flagged_[r]) out.push_back(r);
  return out;
}

double StragglerDetector::Factor() const {
  if (history_.empty()) return 1;
  const auto& c = history_.back().compute_time;
  const double med = core::Median(c, 0.0);
  if (!(med > 0)) return 1;
  double worst = med;
  for (int r = 0; r < static_cast<int>(flagged_.size()); ++r)
    if (flagged_[r]) worst = std::max(worst, c[r]);
  return worst / med;
}

}  // namespace cloudtune::runtime
