// Reads what a job recorded: its JSON Lines sidecar (schema cloudtune.sidecar/1, docs/plugin.md)
// and its saved state (CLOUDTUNE_STATE, schema cloudtune.state/1), for `cloudtune report` and
// `cloudtune recommend --from`.
//
// The reader is robust against what a killed job leaves behind: an unparseable line is skipped and
// counted, an incomplete last line is reported as truncated, and what is missing (no `end` record,
// no recommendation yet) is listed. A sidecar of a foreign schema is refused with an InputError
// naming the file and the line.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "estimator/core/types.h"
#include "estimator/efficiency.h"

namespace cloudtune::cli {

inline constexpr const char* kSidecarSchema = "cloudtune.sidecar/1";

struct SidecarRecord {
  int line = 0;  // 1-based line number in the file
  nlohmann::json json;
};

struct Sidecar {
  std::string path;
  std::vector<SidecarRecord> records;  // the parsed records, in file order
  int lines = 0;                       // non-empty lines read
  std::vector<int> bad_lines;          // lines that did not parse as a record (truncated excluded)
  int truncated_line = 0;  // the last line, when it is incomplete (a killed writer); 0 = none

  // Records of one kind, in file order.
  std::vector<const SidecarRecord*> OfKind(const std::string& kind) const;
  // The last record of `kind`, or null.
  const SidecarRecord* Last(const std::string& kind) const;
  // Human sentences on what is absent or damaged ("no end record: ..."); empty = complete.
  std::vector<std::string> Problems() const;
};

// Reads `path`. Throws cloudtune::InputError when it cannot be opened, has no record at all, or a
// record names another schema ("PATH:LINE: schema 'x' is not cloudtune.sidecar/1").
Sidecar ReadSidecar(const std::string& path);

// What a recorded job's search was computed from, to run it again.
struct RecordedInputs {
  std::map<std::string, std::string> options;  // the start record's CLOUDTUNE_* values
  core::Snapshot snapshot;                     // profile, noise, current, progress, step
  std::string where;                           // "FILE:LINE" (or the state file) they came from
  std::vector<std::string> warnings;           // what could not be reproduced exactly
  // The statistical-efficiency model the job decided with (the record's models.efficiency), when
  // recorded: a re-run with it reproduces the decision even where the job fitted its drift from
  // noise observations the sidecar does not keep.
  std::optional<estimator::EfficiencyModel> efficiency;
};

// From the last `recommendation` record's "inputs" and the `start` record's options. Throws
// InputError naming the file, line and field when there is no recommendation or a field is missing
// or mistyped.
RecordedInputs InputsFromSidecar(const Sidecar& s);
// From a state file (cloudtune.state/1): profile, noise, current, progress; no options (the state
// file does not keep them). Throws InputError with the loader's message when it is rejected.
RecordedInputs InputsFromState(const std::string& path);
// Whether `path` holds a state file (one JSON document of schema cloudtune.state/1) rather than a
// sidecar. Never throws.
bool IsStateFile(const std::string& path);

}  // namespace cloudtune::cli
