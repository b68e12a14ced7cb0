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

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace cloudtune::runtime {

// The fewest timed steps (after the warm-up) a record closed by measure_seconds holds: enough for a
// step-time mean within a few percent (one step's scatter is ~5%) and a gradient-noise update.
inline constexpr int kMinRecordSteps = 5;
// The gradient-noise observations (one per record) a job keeps for its efficiency fit, thinned by
// estimator::ThinNoiseHistory (every batch it has run stays represented); bounds the per-snapshot
// copy.
inline constexpr size_t kMaxNoiseHistory = 64;

struct Options {
  // CLOUDTUNE=1 switches the plugin on; unset or 0 leaves every hook a no-op.
  bool enabled = false;
  // JSON Lines sidecar written by rank 0 (relative paths are relative to the working directory).
  std::string sidecar = "cloudtune.sidecar.jsonl";
  // Trace CSV profile of this job's measurements per configuration (DESIGN §5 format).
  std::string profile = "cloudtune.profile.csv";
  // Instance type (a catalog name) of the machines the job runs on. "local" = unknown: the runtime
  // asks the cloud's metadata service, else maps the CUDA device to the catalog; failing both the
  // job stays "local" (prices unknown, costs counted in GPU-hours; batch and worker advice
  // applies).
  std::string instance_type = "local";
  // Optimizer steps per `measurement` record (and per profile/tuner update).
  int measure_every = 50;
  // A record also closes once it spans this many seconds (warm-up included) and holds at least
  // kMinRecordSteps timed steps: a job whose steps take seconds hands the tuner its first data
  // within about this long, not measure_every steps later (2.5 minutes at 3-second steps). Since
  // the tuner refits at once on the first record and on a configuration change, this bounds how
  // long a job runs its launch configuration unjudged. 0 = by steps only. >= 0.
  double measure_seconds = 30;
  // Steps ignored after start-up and after every configuration change (warm-up, allocations).
  int warmup_steps = 3;
  // Gradient-noise smoothing (hooks/gns.h): the relative standard error the smoothed |G|^2 and
  // tr(Sigma) aim for (> 0), and the longest effective window in steps (>= 8). The window follows
  // the per-step estimates' own variance between 8 steps and gns_max_window.
  double gns_target_error = 0.05;
  double gns_max_window = 1000;
  // Largest local (per-replica, per micro-step) batch the tuner may propose; 0 = no limit.
  int max_local_batch = 0;
  // Most extra gradient-accumulation micro-steps per optimizer step the tuner may propose (0 =
  // none: the job cannot accumulate). >= 0. The search's default (search::SpaceOptions).
  int max_accum_steps = 3;
  // Quota: the most instances (nodes) and the most GPUs over all of them a proposal may use.
  // >= 1 each. The search's defaults (search::SpaceOptions).
  int max_nodes = 16;
  int max_gpus = 64;
  // Observe, then grow: the largest global batch proposed, as a multiple of the largest batch the
  // job has run (search::RecommendOptions::max_batch_growth). >= 1, or 0 = no bound.
  double max_batch_growth = 4;
  // Mixed clusters: when the spot capacity the job knows of leaves a type short, also search
  // clusters of up to this many parts (the spot nodes to be had filled up with the same type on
  // demand or with other types, each type with its own local batch), and report the best in the
  // recommendation ("mixed"). 0 = off, 2 or 3.
  int mixed_types = 2;
  // With objective "cost" and no deadline, a shortage of spot capacity is waited out rather than
  // left for on demand or another type: a spot cluster pays nothing while it waits (as managed spot
  // does); with a budget and no deadline, also when nothing to be had now meets the budget and
  // waiting meets it or overruns it less. false = move to what can be had now. A deadline always
  // turns it off.
  bool wait_for_spot = true;
  // Under a deadline, before a move to other hardware while the job has measured its type at one
  // local batch only, first measure the current hardware at a larger batch, in process
  // (search::RecommendOptions::observe_batch_first). false = move at once.
  bool observe_batch_first = true;
  // Seconds between background refits of the models and searches (the tuner). Also the search's
  // time to the next decision (search::RecommendOptions::decide_again_s): a configuration at the
  // budget's edge is kept while a cheaper one still fits after that long; under a deadline and
  // short of spot capacity, a cheaper configuration that misses it on its own runs while an
  // on-demand one that meets it still would after that long.
  double refit_seconds = 30;
  // What the tuner optimises: "cost" (cheapest to finish) or "time" (fastest to finish).
  std::string objective = "cost";
  // Finish within this many hours (0 = no deadline).
  double deadline_hours = 0;
  // Spend at most this many US dollars (0 = no budget).
  double budget_usd = 0;
  // What counts as finished; the first one set wins (all 0 = no target: the tuner then ranks
  // configurations by cost per unit of progress, or progress per hour for objective "time").
  // Progress in B0-steps (optimizer steps at the initial batch, counted with the gain of larger
  // batches).
  double target_progress = 0;
  // Optimizer steps at the initial batch.
  double target_steps = 0;
  // Training samples.
  double target_samples = 0;
  // Passes over the data; needs dataset_size.
  double target_epochs = 0;
  // Samples per epoch (for target_epochs; 0 = unknown).
  double dataset_size = 0;
  // Instance catalog CSV for the search ("" = the built-in catalog).
  std::string catalog;
  // Trace CSV whose configurations are the only ones the tuner may propose (rows without an
  // instance_type are of instance_type; uneven placements are skipped); "" = the whole space the
  // catalog spans.
  std::string candidates;
  // Comma-separated clouds the tuner may propose instance types of (catalog cloud names: aws, gcp,
  // azure); "" = every cloud of the catalog. Where a job's account, quota or data is.
  std::string clouds;
  // Comma-separated GPU models the tuner may propose (catalog names, e.g. "T4,A10G,L4");
  // "" = every GPU. Both lists are case-insensitive and restrict the types a search considers,
  // not the one the job runs on; a name no catalog type has switches the tuner off, saying so.
  std::string gpus;
  // host:port of the HTTP endpoint (JSON recommendation + Prometheus metrics); "" = off.
  std::string http;
  // File holding the tuner's state across restarts ("" = none).
  std::string state;
  // Job history database (SQLite; plugin/runtime/history.h): a job of a model seen before starts
  // from what the newest such job measured, and each job adds itself at the end. "" = the user's
  // cache directory ($XDG_CACHE_HOME or ~/.cache, cloudtune/history.sqlite); "off" = none.
  std::string history;
  // Where the job asks what it runs on: "auto" = the cloud's instance metadata service
  // (169.254.169.254) when the machine's firmware says it is a cloud VM, "off" = never, or an
  // http:// base URL. Only used when instance_type is not set (CLOUDTUNE_INSTANCE_TYPE).
  std::string metadata_url = "auto";
  // URL polled for spot preemption notices ("" = off).
  std::string preemption_url;
  // Seconds between two polls of preemption_url.
  double preemption_poll_seconds = 5;
  // Seconds every rank waits at start-up for the others to say whether they can switch the plugin
  // on (it is on only if all can). > 0.
  double agree_timeout_seconds = 10;
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
  // The items of a comma-separated list (clouds, gpus), trimmed; {} for "".
  static std::vector<std::string> List(const std::string& value);
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
