// MeasuredSteps: iterations to a validation metric at each measured batch, interpolated in log B.
#include "cli/replay/measured_steps.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>

#include "estimator/core/csv.h"
#include "estimator/core/error.h"

namespace cloudtune::replay {
namespace csv = core::csv;

MeasuredSteps::Carry MeasuredSteps::ParseCarry(const std::string& text, const std::string& where) {
  if (text == "metric") return Carry::kMetric;
  if (text == "progress") return Carry::kProgress;
  throw InputError(where + ": '" + text + "' (expected metric or progress)");
}

MeasuredSteps::Mode MeasuredSteps::ParseMode(const std::string& text, const std::string& where) {
  if (text == "max") return Mode::kMax;
  if (text == "min") return Mode::kMin;
  throw InputError(where + ": '" + text + "' (expected max or min)");
}

// One validation CSV's rows: the iteration and the carried column's value.
struct MeasuredSteps::Rows {
  std::vector<double> iteration, value;
};

namespace {

using Rows = MeasuredSteps::Rows;

Rows ReadRows(const std::string& text, const std::string& name, const char* column) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) csv::Fail(name, 1, 0, "empty file (no header)");
  const auto header = csv::Split(line);
  int ci = -1, cm = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == "iteration") ci = static_cast<int>(i);
    if (header[i] == column) cm = static_cast<int>(i);
  }
  if (ci < 0) csv::Fail(name, 1, 0, "missing column 'iteration'");
  if (cm < 0) csv::Fail(name, 1, 0, std::string("missing column '") + column + "'");
  Rows r;
  double last_it = 0;
  int ln = 1;
  while (std::getline(in, line)) {
    ++ln;
    if (csv::Trim(line).empty()) continue;
    const auto f = csv::Split(line);
    if (f.size() != header.size())
      csv::Fail(name, ln, 0,
                "expected " + std::to_string(header.size()) + " fields, found " +
                    std::to_string(f.size()));
    const double it = csv::Number(f[ci], name, ln, ci + 1, "iteration");
    const double value = csv::Number(f[cm], name, ln, cm + 1, column, true);
    if (it < last_it)
      csv::Fail(name, ln, ci + 1, "iteration: " + f[ci] + " is less than the previous row's");
    last_it = it;
    r.iteration.push_back(it);
    r.value.push_back(value);
  }
  if (r.iteration.empty()) csv::Fail(name, 1, 0, "no data rows after the header");
  return r;
}

// +1 where a higher metric is better, -1 where a lower one is: stated, or read from the runs
// (each run's last row against its first; they must agree).
double MetricSign(MeasuredSteps::Mode mode, const std::map<int, Rows>& rows,
                  const std::map<int, std::string>& names) {
  if (mode == MeasuredSteps::Mode::kMax) return 1;
  if (mode == MeasuredSteps::Mode::kMin) return -1;
  int rises = 0, falls = 0;
  std::string rose, fell;
  for (const auto& [b, r] : rows) {
    const std::string run = "the run at batch " + std::to_string(b) + " (" + names.at(b) + ")";
    if (r.value.back() > r.value.front()) ++rises, rose = run;
    if (r.value.back() < r.value.front()) ++falls, fell = run;
  }
  if (rises > 0 && falls == 0) return 1;
  if (falls > 0 && rises == 0) return -1;
  const std::string why =
      rises > 0 ? "it rises over " + rose + " and falls over " + fell
                : std::string("no run's metric differs between its first row and its last");
  const std::string what = "cannot tell whether a higher or a lower metric is better";
  throw InputError(names.begin()->second + ": metric: " + what + " (" + why +
                   "); set \"metric_mode\" to \"max\" or \"min\"");
}

}  // namespace

MeasuredSteps MeasuredSteps::Build(std::map<int, Rows>&& rows,
                                   const std::map<int, std::string>& names, Carry carry,
                                   Mode mode) {
  MeasuredSteps m;  // `rows` is not empty (Load and Parse check)
  m.carry_ = carry;
  if (carry == Carry::kMetric) m.sign_ = MetricSign(mode, rows, names);
  for (auto& [b, r] : rows) {
    // The rows where the best value so far rises: between them the run is taken to approach the
    // next best linearly (a plateau of validation rows would otherwise freeze the carried state,
    // which a run does not).
    Run run;
    for (size_t i = 0; i < r.iteration.size(); ++i) {
      const double v = m.sign_ * r.value[i];
      if (run.best.empty() || v > run.best.back()) {
        run.iteration.push_back(r.iteration[i]);
        run.best.push_back(v);
      }
    }
    m.runs_[b] = std::move(run);
  }
  return m;
}

MeasuredSteps MeasuredSteps::Load(const std::map<int, std::string>& runs, Carry carry, Mode mode) {
  std::map<int, std::string> texts;
  for (const auto& [b, path] : runs) {
    std::ifstream in(path);
    if (!in) throw InputError(path + ": cannot open");
    std::ostringstream s;
    s << in.rdbuf();
    texts[b] = s.str();
  }
  const char* column = carry == Carry::kMetric ? "metric" : "progress";
  std::map<int, Rows> rows;
  for (const auto& [b, text] : texts) {
    if (b < 1) throw InputError(runs.at(b) + ": batch " + std::to_string(b) + " must be >= 1");
    rows[b] = ReadRows(text, runs.at(b), column);
  }
  if (rows.empty()) throw InputError("measured steps: no validation runs");
  return Build(std::move(rows), runs, carry, mode);
}

MeasuredSteps MeasuredSteps::Parse(const std::map<int, std::string>& texts, const std::string& name,
                                   Carry carry, Mode mode) {
  const char* column = carry == Carry::kMetric ? "metric" : "progress";
  std::map<int, Rows> rows;
  std::map<int, std::string> names;
  for (const auto& [batch, text] : texts) {
    if (batch < 1) throw InputError(name + ": batch " + std::to_string(batch) + " must be >= 1");
    rows[batch] = ReadRows(text, name, column);
    names[batch] = name;
  }
  if (rows.empty()) throw InputError(name + ": no validation runs");
  return Build(std::move(rows), names, carry, mode);
}

std::vector<int> MeasuredSteps::batches() const {
  std::vector<int> v;
  for (const auto& [b, r] : runs_) v.push_back(b);
  return v;
}

double MeasuredSteps::CommonTarget() const {
  double t = runs_.begin()->second.best.back();
  for (const auto& [b, r] : runs_) t = std::min(t, r.best.back());
  return t;
}

double MeasuredSteps::StartMetric() const {
  if (carry_ == Carry::kProgress) return 0;
  double s = runs_.begin()->second.best.front();
  for (const auto& [b, r] : runs_) s = std::min(s, r.best.front());
  return s;
}

double MeasuredSteps::IterationsTo(const Run& r, double m) {
  // Before the first validation row: linear from metric 0 at iteration 0 where that row is above 0;
  // a negated metric (below 0) starts at its first row.
  if (m <= r.best.front())
    return r.best.front() > 0 ? r.iteration.front() * std::clamp(m / r.best.front(), 0.0, 1.0)
                              : r.iteration.front();
  // The first row whose best reaches m (best rises strictly from row to row).
  const auto it = std::lower_bound(r.best.begin() + 1, r.best.end(), m);
  if (it == r.best.end())
    return r.iteration.back();  // beyond the run: capped (callers stay within)
  const size_t i = static_cast<size_t>(it - r.best.begin());
  const double f = (m - r.best[i - 1]) / (r.best[i] - r.best[i - 1]);
  return r.iteration[i - 1] + f * (r.iteration[i] - r.iteration[i - 1]);
}

double MeasuredSteps::Iterations(double batch, double m) const {
  if (!(batch >= min_batch() && batch <= max_batch()))
    throw InputError("measured steps: batch " + std::to_string(batch) +
                     " is outside the measured batches [" + std::to_string(runs_.begin()->first) +
                     ", " + std::to_string(runs_.rbegin()->first) + "]");
  auto hi = runs_.lower_bound(static_cast<int>(std::ceil(batch)));
  if (hi->first == batch || hi == runs_.begin()) return IterationsTo(hi->second, m);
  auto lo = std::prev(hi);
  const double a = IterationsTo(lo->second, m), b = IterationsTo(hi->second, m);
  if (!(a > 0) || !(b > 0)) return a + (b - a) * (batch - lo->first) / (hi->first - lo->first);
  const double w = std::log(batch / lo->first) / std::log(double(hi->first) / lo->first);
  return std::exp((1 - w) * std::log(a) + w * std::log(b));
}

double MeasuredSteps::StepsBetween(double batch, double from, double to) const {
  if (to < from) throw InputError("measured steps: target metric below the current one");
  return std::max(0.0, Iterations(batch, to) - Iterations(batch, from));
}

double MeasuredSteps::MetricAfter(double batch, double from, double steps) const {
  const double start = Iterations(batch, from), goal = start + std::max(0.0, steps);
  double top = from;
  for (const auto& [b, r] : runs_) top = std::max(top, r.best.back());
  if (Iterations(batch, top) <= goal) return top;
  // The largest m in [from, top] with Iterations(batch, m) <= goal (non-decreasing in m). The
  // iterations are piecewise smooth between the metrics at which a neighbouring run's best rose:
  // find that piece by bisection over those breakpoints, then bisect inside it.
  auto hi = runs_.lower_bound(static_cast<int>(std::ceil(batch)));
  const std::vector<double>& bh = hi->second.best;
  const std::vector<double>& bl = (hi == runs_.begin() ? hi : std::prev(hi))->second.best;
  std::vector<double> cuts;
  cuts.reserve(bh.size() + bl.size() + 2);
  cuts.push_back(from);
  std::merge(std::upper_bound(bh.begin(), bh.end(), from),
             std::lower_bound(bh.begin(), bh.end(), top),
             std::upper_bound(bl.begin(), bl.end(), from),
             std::lower_bound(bl.begin(), bl.end(), top), std::back_inserter(cuts));
  cuts.push_back(top);
  size_t a = 0, b = cuts.size() - 1;  // Iterations(cuts[a]) <= goal < Iterations(cuts[b])
  while (b - a > 1) {
    const size_t mid = (a + b) / 2;
    (Iterations(batch, cuts[mid]) <= goal ? a : b) = mid;
  }
  // Inside the piece each neighbouring run's iterations are linear in m: bisect on the
  // interpolation of its ends (as Iterations() combines them) without searching the runs again.
  const double m0 = cuts[a], m1 = cuts[b];
  const bool single = hi->first == batch || hi == runs_.begin();
  const Run& rh = hi->second;
  const Run& rl = single ? rh : std::prev(hi)->second;
  const double h0 = IterationsTo(rh, m0), h1 = IterationsTo(rh, m1);
  const double l0 = IterationsTo(rl, m0), l1 = IterationsTo(rl, m1);
  const double lb = single ? batch : std::prev(hi)->first;
  const double w = single ? 1.0 : std::log(batch / lb) / std::log(double(hi->first) / lb);
  const double wl = single ? 1.0 : (batch - lb) / (hi->first - lb);
  auto iterations = [&](double t) {
    const double x = l0 + t * (l1 - l0), y = h0 + t * (h1 - h0);
    if (single) return y;
    if (!(x > 0) || !(y > 0)) return x + (y - x) * wl;
    return std::exp((1 - w) * std::log(x) + w * std::log(y));
  };
  double lo = 0, up = 1;
  if (single || !(l0 > 0 && h0 > 0)) {  // linear in t (the run itself, or the linear mix)
    for (int i = 0; i < 60; ++i) {
      const double mid = 0.5 * (lo + up);
      (iterations(mid) <= goal ? lo : up) = mid;
    }
    return m0 + lo * (m1 - m0);
  }
  // Both positive: log iterations is concave and increasing in t; Newton, kept inside [lo, up].
  const double lg = std::log(goal);
  double t = 0.5;
  for (int i = 0; i < 100; ++i) {
    const double x = l0 + t * (l1 - l0), y = h0 + t * (h1 - h0);
    const double f = (1 - w) * std::log(x) + w * std::log(y) - lg;
    (f <= 0 ? lo : up) = t;
    const double df = (1 - w) * (l1 - l0) / x + w * (h1 - h0) / y;
    double next = df > 0 ? t - f / df : 0.5 * (lo + up);
    if (!(next > lo && next < up)) next = 0.5 * (lo + up);
    if (std::abs(next - t) <= 1e-16 || up - lo <= 1e-16) break;
    t = next;
  }
  return m0 + lo * (m1 - m0);
}

}  // namespace cloudtune::replay
