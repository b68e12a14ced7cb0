// The oracle's seed-independent tables (Oracle::Tables): what one window does on each
// configuration from each progress level, and a lower bound of the cost to go. Private to the
// oracle (oracle.cpp, oracle_tables.cpp).
#pragma once

#include <cstddef>
#include <vector>

#include "cli/replay/oracle.h"

namespace cloudtune::replay {

struct Oracle::Tables {
  WindowModel model;
  int K = 0;     // levels: u_k = k × target / K, k in [0, K); K = finished
  double W = 0;  // window, s
  std::vector<Config> configs;
  std::vector<int> group;          // same instances (type, nodes, GPUs/node, purchase, zone)
  std::vector<double> price;       // USD/h
  std::vector<double> ckpt_share;  // checkpoint seconds per training second
  double switch_s[3] = {0, 0, 0};  // per class: 0 stay, 1 batch switch, 2 other hardware
  std::vector<int> spot_nodes;     // spot nodes held (0: on demand)
  // Per config: the zone of its type's spot market its spot nodes are in (-1: no spot nodes on a
  // traced type). A spot configuration of a type sold in several zones is one configuration per
  // zone: moving between them is a relaunch (class 2), as it is for a job.
  std::vector<int> zone;
  // Per config: its row of the per-level tables below, which its copies in other zones share
  // (they progress alike); per row, one configuration of it.
  std::vector<int> row;
  std::vector<size_t> rep;
  // Per class, row, level: the next level rounded down / up (K = finished) and the training
  // seconds to the target when it finishes inside the window (-1 otherwise).
  std::vector<int> next_lo[3], next_hi[3];
  std::vector<float> next_x[3];  // the same unrounded, in levels (K when it finishes)
  std::vector<float> finish[3];
  int start = -1;       // the start configuration, on demand
  int start_spot = -1;  // the same launched on spot (as the fixed-spot baseline is), if any
  // May be launched without a switch: the start on demand or on spot, and, on a spot capacity
  // trace, on spot on fewer of its nodes (an elastic launch on the nodes the market has, as the
  // cloudtune job is launched); each seed's Solver keeps the latter only when the market has fewer
  // than the start's nodes at time 0.
  std::vector<char> free_launch;
  // Per class, config, level: a lower bound of the cost of every schedule that runs the next
  // window there and goes on to the target, in any of the recursions (BoundCostToGo); rounded
  // down to a float.
  std::vector<float> to_go[3];
  // Per recursion (0: positions carried, 1: next_lo, 2: next_hi), per level: the same bound for a
  // state standing there.
  std::vector<double> from_level[3];
  bool prune = false;  // OracleOptions::prune (the bounds are filled only then)
  explicit Tables(const Scenario& s, double w) : model(s, w) {}
  // The tables' entry of configuration c at level k.
  size_t At(size_t c, int k) const { return static_cast<size_t>(row[c]) * K + k; }
  // Seconds of a window of class cls on configuration c that reaches the target after `fin`
  // training seconds: its switch, then the training with its checkpoints.
  double FinishSeconds(int cls, size_t c, double fin) const {
    return switch_s[cls] + fin * (1 + ckpt_share[c]);
  }
};

}  // namespace cloudtune::replay
