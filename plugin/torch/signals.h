// SIGTERM (how torchrun and the examples' launcher stop workers) on rank 0: the sidecar gets its
// "end" record and is flushed before the process dies as it would have. Installed only where the
// job has not set a SIGTERM handler of its own (then the job's handler decides; it may call
// cloudtune::Shutdown()). The handler only writes one byte to a pipe; a watcher thread does the
// rest, then restores the default action and re-raises the signal.
#pragma once

#include <functional>

namespace cloudtune::plugin {

// Starts watching; `on_term` runs on the watcher thread when SIGTERM arrives. Returns false (and
// installs nothing) when SIGTERM already has a handler or the pipe cannot be made.
bool WatchTermination(std::function<void()> on_term);
// Stops watching and restores the previous disposition. Idempotent.
void StopWatchingTermination();

}  // namespace cloudtune::plugin
