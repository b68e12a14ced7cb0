// Job history (warm start): an embedded SQLite database of the jobs this user ran, so that a new
// job of a model seen before starts from what the earlier one measured instead of cold.
//
// Each job that ends (Runtime::Stop on rank 0) adds one row: its model signature (parameter count
// and a hash of the gradient shapes the hooks see), the configurations it ran with their measured
// step and all-reduce times (per instance type), its gradient-noise trajectory, the fitted models
// of its last recommendation (per-type throughput parameters, efficiency) and what it spent. A new
// job whose signature matches takes the newest such job's configurations and noise as a prior
// (WarmStart): its own measurements replace the prior's configuration by configuration.
//
// Database (schema "cloudtune.history/1" in table meta): tables jobs, configurations, noise. WAL
// journal and a busy timeout: several ranks or jobs may write at once; each job is one
// transaction (all of it or nothing). A corrupt or foreign file (another schema, not SQLite) is
// reported once with its path and ignored; the job goes on without history.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "estimator/core/types.h"

struct sqlite3;

namespace cloudtune::runtime {

inline constexpr const char* kHistorySchema = "cloudtune.history/1";

struct HistoryOptions {
  // Database file (CLOUDTUNE_HISTORY). "" = DefaultHistoryPath(); "off" = no history.
  std::string path;
  // How long a writer waits for another one's transaction (seconds). > 0.
  double busy_timeout_seconds = 10;
  bool IsValid(std::string* error) const;
};

// $XDG_CACHE_HOME/cloudtune/history.sqlite, else $HOME/.cache/cloudtune/history.sqlite; "" when
// neither variable is set.
std::string DefaultHistoryPath();

// Identity of a model: its parameter count and a hash of the shapes of its gradient tensors, in
// order. Two jobs of the same model (and the same gradient bucketing) share it.
struct ModelSignature {
  long long parameters = 0;  // elements over all gradient tensors
  // Bytes over all gradient tensors (elements x element size): what one step all-reduces. Not part
  // of the identity (the same model in another precision is the same model).
  double gradient_bytes = 0;
  std::string shapes_hash;  // FNV-1a 64 of the shapes, hex
  bool empty() const { return shapes_hash.empty(); }
  std::string ToString() const;  // "P-HASH", e.g. "206922-9f3c…"
};
ModelSignature MakeSignature(const std::vector<std::vector<int64_t>>& shapes);

// One job as the history keeps it.
struct HistoryJob {
  long long id = 0;                                  // row id (set by the database)
  std::string job_id;                                // the run id (torchrun) or CLOUDTUNE_JOB
  std::string signature;                             // ModelSignature::ToString()
  long long parameters = 0;                          // parameter count
  std::string recorded_at;                           // UTC ISO 8601 (set by Record)
  std::string instance_type;                         // the type it ran on last
  std::string objective;                             // "cost" / "time"
  long long steps = 0;                               // optimizer steps
  double progress = 0;                               // B0-steps
  double hours = 0;                                  // elapsed
  double cost_usd = 0;                               // spent (0 when prices were unknown)
  std::vector<core::Measurement> configurations;     // what it ran, measured
  std::vector<core::NoiseObservation> noise;         // noise trajectory
  core::NoiseState last_noise;                       // the smoothed state at the end
  nlohmann::json models = nlohmann::json::object();  // {"throughput":…, "efficiency":…}
  nlohmann::json ToJson() const;                     // for `cloudtune history show|export`
};

class History {
 public:
  // Opens (creating it and its directory when absent) the database at `path`. Returns null with
  // "PATH: what" in *error when it cannot be opened or is corrupt or foreign. Never throws.
  static std::unique_ptr<History> Open(const std::string& path, const HistoryOptions& options,
                                       std::string* error);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Adds a job in one transaction; returns its id, or 0 with *error set. Never throws.
  long long Record(const HistoryJob& job, std::string* error);
  // Jobs newest first without their configurations and noise (at most `limit`; 0 = all).
  std::vector<HistoryJob> List(int limit = 0) const;
  // One job in full, or nullopt.
  std::optional<HistoryJob> Get(long long id) const;
  // The newest job with this signature (in full), or nullopt.
  std::optional<HistoryJob> Latest(const std::string& signature) const;
  const std::string& path() const { return path_; }

 private:
  History(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  std::vector<HistoryJob> Query(const std::string& where, long long arg, int limit,
                                bool full) const;
  sqlite3* db_;
  std::string path_;
};

// The prior a new job starts from: `prior`'s configurations and noise, to be merged under what the
// job measures itself (WarmSnapshot).
struct WarmPrior {
  long long from_job = 0;  // history row it came from
  std::string job_id;
  std::vector<core::Measurement> configurations;
  core::NoiseState noise;
  std::vector<core::NoiseObservation> noise_history;
};
WarmPrior MakeWarmPrior(const HistoryJob& job);

// `live` with the prior underneath: the prior's configurations that the job has not measured itself
// are added; its noise state is used until the job has its own (noise_valid false), and its noise
// trajectory (before the job's own) feeds the efficiency fit. Progress, steps and spending stay
// the job's own.
core::Snapshot WarmSnapshot(const core::Snapshot& live, const WarmPrior& prior);

}  // namespace cloudtune::runtime
