// Real spot capacity for the replay: the AWS availability and preemption traces of the Can't Be
// Late collection (shared/data/spot-traces, SOURCES.md), one value per tick of gap_seconds.
//
// File: {"metadata": {"gap_seconds": G}, "data": [v0, v1, ...]}.
// What a value means is not settled by the source, so the reading is an explicit choice:
//   kCount        — v is the number of instances that can be had (the upstream README's words); a
//                   single-node file then says 0 = none, 1 = one;
//   kZeroIsUp     — v = 0 means spot is available (every node asked for), non-zero means not
//                   available / preempted (how the authors' own simulator reads single-node files).
// A replay shows its results under both readings where they differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cloudtune::replay {

enum class SpotReading { kCount, kZeroIsUp };
// "count", "zero-is-up"; ParseSpotReading throws cloudtune::InputError naming `where`.
const char* SpotReadingName(SpotReading r);
SpotReading ParseSpotReading(const std::string& s, const std::string& where);

class SpotTrace {
 public:
  // Throws cloudtune::InputError "PATH: FIELD: what" (missing/non-positive gap_seconds, no data,
  // a value that is not a non-negative integer, with its index).
  static SpotTrace Load(const std::string& path);
  static SpotTrace Parse(const std::string& text, const std::string& name);

  double gap_seconds() const { return gap_s_; }
  size_t ticks() const { return values_.size(); }
  double duration_s() const { return gap_s_ * static_cast<double>(values_.size()); }
  const std::string& name() const { return name_; }

  // Nodes that can be had at time t (seconds from `offset_s` into the trace; the trace repeats
  // past its end), out of `wanted`, under `reading`.
  int Available(double t_s, int wanted, SpotReading reading, double offset_s = 0) const;
  // The first time >= t_s at which Available() < wanted (a running cluster of `wanted` spot nodes
  // loses capacity: a revocation), or +infinity if none within `horizon_s`.
  double NextShortage(double t_s, int wanted, SpotReading reading, double offset_s,
                      double horizon_s) const;
  // Shortages per hour up and hours down, over the whole trace, for `wanted` nodes: what a
  // single-type job on this capacity would face.
  struct Summary {
    double revocations_per_hour_up = 0;  // drops below `wanted` per hour of full capacity
    double up_share = 0;                 // share of the time with `wanted` nodes available
    double longest_outage_h = 0;
  };
  Summary Summarise(int wanted, SpotReading reading) const;

 private:
  int Value(double t_s, double offset_s) const;
  std::string name_;
  double gap_s_ = 0;
  std::vector<int> values_;
};

// One instance type's spot capacity over the zones it is sold in, each zone a SpotTrace. A request
// gets the nodes of the zone that has the most (a launcher tries every zone, as SkyPilot's
// managed spot does); a running cluster holds its nodes in the one zone it was launched in, and
// moving to another zone is a relaunch. A market built from one trace has one zone.
class SpotMarket {
 public:
  SpotMarket() = default;
  SpotMarket(SpotTrace trace);  // NOLINT: one zone, unnamed (implicit: a trace is a market)
  // Adds a zone; its name shows in messages about its trace.
  void AddZone(std::string name, SpotTrace trace);

  size_t zones() const { return traces_.size(); }
  const SpotTrace& zone(size_t z) const { return traces_[z]; }
  const std::string& zone_name(size_t z) const { return names_[z]; }

  // Nodes a request can get at time t_s (out of `wanted`): the most any zone has.
  int Available(double t_s, int wanted, SpotReading reading, double offset_s = 0) const;
  // The zone a request for `wanted` nodes launches in at t_s: the first of those with the most.
  size_t BestZone(double t_s, int wanted, SpotReading reading, double offset_s = 0) const;

 private:
  std::vector<std::string> names_;
  std::vector<SpotTrace> traces_;
};

}  // namespace cloudtune::replay
