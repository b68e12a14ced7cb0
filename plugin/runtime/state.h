// What the tuner learned, saved across restarts (CLOUDTUNE_STATE): the profile, the gradient noise
// state, the fitted models and the progress. Written with write-then-rename (a crash leaves the old
// file or the new one, never half of one) as
//   {"schema":"cloudtune.state/1","job_id":"…","checksum":"fnv1a64:…","state":{…}}
// On load a missing file is normal; a corrupt, truncated, foreign (other job id or schema) or
// implausible file is reported with a message naming the file and the problem, and ignored.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "estimator/core/types.h"

namespace cloudtune::runtime {

inline constexpr const char* kStateSchema = "cloudtune.state/1";

struct StateOptions {
  // File to save to and restore from (CLOUDTUNE_STATE). "" = no state is kept.
  std::string path;
  // Identity of the job (e.g. the torchrun run id or CLOUDTUNE_JOB); a state file saved by a job
  // with another identity is foreign and ignored. "" = accept any identity.
  std::string job_id;
  // Save at most this often (seconds) from the background executor. > 0.
  double save_seconds = 60;
  bool IsValid(std::string* error) const;
};

struct SavedState {
  std::string job_id;
  long long step = 0;                      // optimizer steps done
  double progress = 0;                     // progress in base-batch steps (>= 0)
  core::ConfigKey current;                 // configuration that ran last
  int current_gpus_per_node = 0;           // its GPUs per machine (0 = from `current`: older files)
  std::vector<core::Measurement> profile;  // measured configurations
  core::NoiseState noise;                  // smoothed gradient statistics
  nlohmann::json gns = nlohmann::json::object();  // GNS estimator internals (owned by hooks/)
  nlohmann::json models =
      nlohmann::json::object();   // fitted models {"throughput":…, "efficiency":…}
  nlohmann::json recommendation;  // the last published recommendation (or null)
  // Spot exposure and revocations per instance type over the run (optional in the file: states
  // written before it have none).
  std::map<std::string, core::SpotExposure> spot_exposure;
  double gradient_bytes = 0;  // what a step all-reduces (optional in the file; 0 = unknown)
  std::string saved_at;       // UTC, ISO 8601 (set by SaveState)

  // The payload ("state" member of the file).
  nlohmann::json ToJson() const;
  // Throws cloudtune::InputError naming `source` and the field on a missing, mistyped or
  // implausible member (negative times, sync >= step, non-finite numbers …).
  static SavedState FromJson(const nlohmann::json& j, const std::string& source);
};

// Writes `s` to `path` (temporary file in the same directory, fsync, rename). Returns false with
// a message naming the file when it cannot; never throws.
bool SaveState(const std::string& path, const SavedState& s, std::string* error);

enum class LoadStatus {
  kLoaded,    // state is set
  kMissing,   // no file: a fresh start
  kRejected,  // the file exists but is corrupt, truncated, foreign or implausible: message says why
};

struct LoadResult {
  LoadStatus status = LoadStatus::kMissing;
  std::optional<SavedState> state;
  std::string message;  // "STATE_FILE: what is wrong" for kRejected; "" otherwise
};

// Reads `path`. `expected_job_id` "" accepts any job identity. Never throws.
LoadResult LoadState(const std::string& path, const std::string& expected_job_id);

// What to save: the snapshot, the latest recommendation (and its "models") and `gns` (the hooks'
// estimator internals). Call it off the training thread and pass the result to SaveState.
SavedState MakeSavedState(const core::Snapshot& s, const nlohmann::json* recommendation,
                          const std::string& job_id, nlohmann::json gns = nlohmann::json::object());
// The snapshot a restarted job starts from (Tuner::Resume it with the trigger "restored" so
// the first recommendation uses the earlier measurements).
core::Snapshot RestoreSnapshot(const SavedState& state);
// {TYPE: {"node_hours": h, "revocations": k}}: the spot exposure as the state file and a
// recommendation's inputs write it.
nlohmann::json SpotExposureJson(const std::map<std::string, core::SpotExposure>& exposure);
// The inverse: reads that object. Throws cloudtune::InputError naming `source` and the field
// (`where`.TYPE.node_hours, ...) on a value that is not an object, missing or negative.
std::map<std::string, core::SpotExposure> SpotExposureFromJson(const nlohmann::json& j,
                                                               const std::string& source,
                                                               const std::string& where);

}  // namespace cloudtune::runtime
