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
#include <vector>

#include "estimator/core/types.h"

namespace cloudtune::estimator {

using core::ConfigKey;    // estimator/core/types.h
using core::Measurement;  // estimator/core/types.h

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
