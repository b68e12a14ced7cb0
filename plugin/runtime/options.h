// The plugin's settings: one Options struct read once at start-up from CLOUDTUNE_<KEY> environment
// variables, KEY being the upper-cased field name (e.g. measure_every <- CLOUDTUNE_MEASURE_EVERY).
// The plugin itself is switched on by CLOUDTUNE=1 (see Options::enabled).
//
//   std::string err;
//   Options o = Options::FromEnv(&err);        // err names a variable that did not parse
//   if (!err.empty() || !o.IsValid(&err)) { log one line; switch the plugin off; }
//
// EnvTable() lists every variable with its default and meaning (the README table is generated
// from / checked against it).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cloudtune::runtime {

struct Options {
  // CLOUDTUNE=1 switches the plugin on; unset or 0 leaves every hook a no-op.
  bool enabled = false;
  // JSON Lines sidecar written by rank 0 (relative paths are relative to the working directory).
  std::string sidecar = "cloudtune.sidecar.jsonl";
  // Trace CSV profile of this job's measurements per configuration (DESIGN §5 format).
  std::string profile = "cloudtune.profile.csv";
  // Instance type written into the profile's instance_type column.
  std::string instance_type = "local";
  // Optimizer steps per `measurement` record (and per profile/tuner update).
  int measure_every = 50;
  // Steps ignored after start-up and after every configuration change (warm-up, allocations).
  int warmup_steps = 3;
  // Decay of the exponential moving averages of |G|^2 and tr(Sigma), per step, in [0, 1).
  double gns_ema = 0.95;
  // Largest local (per-replica, per micro-step) batch the tuner may propose; 0 = no limit.
  int max_local_batch = 0;
  // Seconds between background refits of the models and searches (tuner, later issues).
  double refit_seconds = 30;
  // What the tuner optimises: "cost" (cheapest to finish) or "time" (fastest to finish).
  std::string objective = "cost";
  // Finish within this many hours (0 = no deadline).
  double deadline_hours = 0;
  // Spend at most this many US dollars (0 = no budget).
  double budget_usd = 0;
  // Progress (optimizer steps at the initial batch) that counts as finished (0 = unknown).
  double target_progress = 0;
  // Instance catalog CSV for the search ("" = the built-in catalog).
  std::string catalog;
  // Trace CSV whose configurations are the only ones the tuner may propose (rows without an
  // instance_type are of instance_type; uneven placements are skipped); "" = the whole space the
  // catalog spans.
  std::string candidates;
  // host:port of the HTTP endpoint (JSON recommendation + Prometheus metrics); "" = off.
  std::string http;
  // File holding the tuner's state across restarts ("" = none).
  std::string state;
  // URL polled for spot preemption notices ("" = off).
  std::string preemption_url;
  // Seconds between two polls of preemption_url.
  double preemption_poll_seconds = 5;
  // Steps between two straggler checks across ranks (0 = off).
  int straggler_every = 200;
  // Log verbosity: "error", "warn", "info" or "debug".
  std::string log_level = "info";

  // Reads CLOUDTUNE and CLOUDTUNE_<KEY> through `getenv` (defaults for unset variables). A value
  // that does not parse as the field's type is reported in *error ("CLOUDTUNE_X='v': why") and
  // leaves the default in place.
  static Options FromEnv(std::string* error,
                         const std::function<const char*(const char*)>& getenv = nullptr);

  // Checks ranges and enumerations; on failure writes "CLOUDTUNE_X='value': why" to *error.
  bool IsValid(std::string* error) const;
};

// One documented variable.
struct EnvVar {
  std::string name;           // CLOUDTUNE_MEASURE_EVERY
  std::string default_value;  // "50"
  std::string doc;            // what it does, units
};
// Every variable Options reads, in declaration order (CLOUDTUNE first).
const std::vector<EnvVar>& EnvTable();

}  // namespace cloudtune::runtime
