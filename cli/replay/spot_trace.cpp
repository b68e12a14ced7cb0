// SpotTrace: the real AWS spot capacity traces, under an explicit reading of their values.
#include "cli/replay/spot_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "estimator/core/error.h"

namespace cloudtune::replay {

const char* SpotReadingName(SpotReading r) {
  return r == SpotReading::kCount ? "count" : "zero-is-up";
}

SpotReading ParseSpotReading(const std::string& s, const std::string& where) {
  if (s == "count") return SpotReading::kCount;
  if (s == "zero-is-up") return SpotReading::kZeroIsUp;
  throw InputError(where + ": '" + s + "' is not a spot trace reading (count or zero-is-up)");
}

SpotTrace SpotTrace::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return Parse(s.str(), path);
}

SpotTrace SpotTrace::Parse(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(name + ": not valid JSON (" + e.what() + ")");
  }
  SpotTrace t;
  t.name_ = name;
  if (!j.is_object() || !j.contains("metadata") || !j["metadata"].is_object())
    throw InputError(name + ": metadata: missing object");
  const auto& g = j["metadata"].value("gap_seconds", nlohmann::json());
  if (!g.is_number() || !(g.get<double>() > 0) || !std::isfinite(g.get<double>()))
    throw InputError(name + ": metadata.gap_seconds: expected a positive number");
  t.gap_s_ = g.get<double>();
  if (!j.contains("data") || !j["data"].is_array() || j["data"].empty())
    throw InputError(name + ": data: expected a non-empty array");
  const auto& d = j["data"];
  t.values_.reserve(d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    const auto& v = d[i];
    const double x = v.is_number() ? v.get<double>() : -1;
    if (!(x >= 0) || x != std::floor(x) || x > 1e6)
      throw InputError(name + ": data[" + std::to_string(i) + "]: expected an integer >= 0, got " +
                       v.dump());
    t.values_.push_back(static_cast<int>(x));
  }
  return t;
}

int SpotTrace::Value(double t_s, double offset_s) const {
  const double ticks = std::floor((t_s + offset_s) / gap_s_);
  const double n = static_cast<double>(values_.size());
  const double k = std::fmod(std::max(0.0, ticks), n);
  return values_[static_cast<size_t>(k)];
}

int SpotTrace::Available(double t_s, int wanted, SpotReading reading, double offset_s) const {
  const int v = Value(t_s, offset_s);
  if (reading == SpotReading::kZeroIsUp) return v == 0 ? wanted : 0;
  return std::min(v, wanted);
}

double SpotTrace::NextShortage(double t_s, int wanted, SpotReading reading, double offset_s,
                               double horizon_s) const {
  // Tick boundaries from t_s on: the value changes only there.
  double t = t_s;
  const double end = t_s + horizon_s;
  while (t <= end) {
    if (Available(t, wanted, reading, offset_s) < wanted) return t;
    const double next = (std::floor((t + offset_s) / gap_s_) + 1) * gap_s_ - offset_s;
    t = std::max(next, t + 1e-9);
  }
  return std::numeric_limits<double>::infinity();
}

SpotTrace::Summary SpotTrace::Summarise(int wanted, SpotReading reading) const {
  Summary s;
  double up = 0, outage = 0;
  int drops = 0;
  bool was_up = false;
  for (size_t i = 0; i < values_.size(); ++i) {
    const int v = values_[i];
    const int avail =
        reading == SpotReading::kZeroIsUp ? (v == 0 ? wanted : 0) : std::min(v, wanted);
    const bool is_up = avail >= wanted;
    if (is_up) {
      up += gap_s_;
      outage = 0;
    } else {
      if (was_up) ++drops;
      outage += gap_s_;
      s.longest_outage_h = std::max(s.longest_outage_h, outage / 3600.0);
    }
    was_up = is_up;
  }
  s.up_share = up / duration_s();
  s.revocations_per_hour_up = up > 0 ? drops / (up / 3600.0) : 0;
  return s;
}

SpotMarket::SpotMarket(SpotTrace trace) { AddZone("", std::move(trace)); }

void SpotMarket::AddZone(std::string name, SpotTrace trace) {
  names_.push_back(std::move(name));
  traces_.push_back(std::move(trace));
}

int SpotMarket::Available(double t_s, int wanted, SpotReading reading, double offset_s) const {
  int best = 0;
  for (const SpotTrace& t : traces_)
    best = std::max(best, t.Available(t_s, wanted, reading, offset_s));
  return best;
}

size_t SpotMarket::BestZone(double t_s, int wanted, SpotReading reading, double offset_s) const {
  size_t best = 0;
  int most = -1;
  for (size_t z = 0; z < traces_.size(); ++z) {
    const int n = traces_[z].Available(t_s, wanted, reading, offset_s);
    if (n > most) best = z, most = n;
  }
  return best;
}

}  // namespace cloudtune::replay
