// The one atomic file writer: every whole-file output (profile CSV, saved state, CLI outputs,
// model JSON) is written to a temporary file in the same directory, flushed to disk (fsync) and
// renamed over the target, so a reader or a crash sees the old file or the new one, never half of
// one. Appended streams (the sidecar) use append-then-flush instead (plugin/runtime/sidecar.h).
#pragma once

#include <string>

namespace cloudtune::core {

// Writes `text` to `path` atomically. Returns false with "PATH: what failed: reason" in *error
// (may be null); never throws. The temporary file is removed on failure.
bool WriteFileAtomically(const std::string& path, const std::string& text, std::string* error);

// The same, throwing cloudtune::InputError with that message.
void WriteFileAtomicallyOrThrow(const std::string& path, const std::string& text);

}  // namespace cloudtune::core
