// Trace CSVs (DESIGN §5): the measured step and sync time of training configurations.
//
// Two layouts are accepted, columns read by header in any order:
//   placement,local_bsz,step_time,sync_time            placement = per-node GPU counts, "1244"
//   num_nodes,num_replicas,local_bsz,step_time,sync_time
// with optional accum_steps (extra accumulation micro-steps per optimizer step, default 0) and
// instance_type (default ""). Other columns are ignored. Rows that share a ConfigKey are one
// configuration: their times are averaged.
#pragma once

#include <iosfwd>
#include <string>
#include <tuple>
#include <vector>

namespace cloudtune::estimator {

// What identifies a configuration.
struct ConfigKey {
  int num_nodes = 1;          // machines
  int num_replicas = 1;       // data-parallel workers (GPUs) over all machines
  int local_bsz = 1;          // samples per worker per micro-step
  int accum_steps = 0;        // extra accumulation micro-steps per optimizer step (0 = none)
  std::string instance_type;  // "" when the trace does not say

  // Samples per optimizer step: num_replicas * local_bsz * (accum_steps + 1).
  long long global_batch() const {
    return static_cast<long long>(num_replicas) * local_bsz * (accum_steps + 1);
  }
  auto tie() const {
    return std::tie(instance_type, num_nodes, num_replicas, local_bsz, accum_steps);
  }
  bool operator<(const ConfigKey& o) const { return tie() < o.tie(); }
  bool operator==(const ConfigKey& o) const { return tie() == o.tie(); }
};

// One configuration's averaged measurements.
struct Measurement {
  ConfigKey key;
  double step_time = 0;       // seconds per optimizer step (mean over rows)
  double sync_time = 0;       // seconds of it spent in the gradient all-reduce (mean over rows)
  int rows = 0;               // rows averaged
  int max_gpus_per_node = 0;  // largest per-node GPU count seen in a placement (0 = unknown)
  double compute_time() const { return step_time - sync_time; }
  // Samples per second at this configuration.
  double throughput() const { return static_cast<double>(key.global_batch()) / step_time; }
};

// Parses one trace; `name` is used in error messages. Throws cloudtune::InputError naming
// name:line:column for: no header/empty input, missing column, a non-numeric, negative or
// non-integral value, a malformed placement, and a configuration whose mean sync_time >= step_time.
std::vector<Measurement> ParseTrace(std::istream& in, const std::string& name);

// Reads and merges several trace files (rows of the same configuration across files are averaged
// together). Throws cloudtune::InputError ("FILE: cannot open" for a missing file).
std::vector<Measurement> ReadTraces(const std::vector<std::string>& paths);

// Writes measurements in the num_nodes,num_replicas,local_bsz,accum_steps,step_time,sync_time,
// instance_type layout (one row per configuration, full double precision).
void WriteTrace(std::ostream& out, const std::vector<Measurement>& ms);

}  // namespace cloudtune::estimator
