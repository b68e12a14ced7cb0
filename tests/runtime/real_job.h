// The real fit-and-search inputs the tuner tests share: options for a cost goal on g4dn.12xlarge
// and a snapshot of the measured cifar10 profile (Pollux T4 traces), run on its most-measured
// configuration.
#pragma once

#include <string>

#include "estimator/core/trace.h"
#include "plugin/runtime/fit_and_search.h"

namespace cloudtune::runtime::testing {

inline FitAndSearchOptions RealOptions() {
  FitAndSearchOptions o;
  o.instance_type = "g4dn.12xlarge";
  o.target.progress = 20000;
  o.recommend.objective.goal = cloudtune::search::Goal::kCost;
  return o;
}

inline Snapshot RealSnapshot() {
  Snapshot s;
  s.profile = cloudtune::estimator::ReadTraces(
      {std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/cifar10/placements.csv"});
  const cloudtune::core::Measurement* most = &s.profile[0];
  for (const auto& m : s.profile)
    if (m.rows > most->rows) most = &m;
  s.current = most->key;
  s.gpus_per_node = most->max_gpus_per_node;
  s.noise = {0.02, 4.0, 128, false};
  s.progress = 1500;
  s.step = 3000;
  return s;
}

}  // namespace cloudtune::runtime::testing
