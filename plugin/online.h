// The online tuner inside the job (issue #6): the service pieces of plugin/service/ wired to a
// running Plugin, created from the plugin's Options by Plugin::Start and stopped by Plugin::Finish.
//
// On rank 0 (the plugin enabled):
//   - a service::Tuner (background Asio executor) fed by the plugin's observer: every
//     CLOUDTUNE_MEASURE_EVERY steps the plugin::Snapshot is converted to a service::Snapshot
//     (progress in B0-steps accumulated here) and Offer()ed, O(configurations); the tuner refits
//     every CLOUDTUNE_REFIT_SECONDS and writes each new `recommendation` record to the sidecar
//     plus one log line. Each record also carries what it was computed from ("inputs": the noise
//     state, progress, current configuration and the profile as trace CSV), so that
//     `cloudtune recommend` can be run on exactly the same problem;
//   - the HTTP endpoint when CLOUDTUNE_HTTP is set (providers read only the tuner's atomics);
//   - saved state (CLOUDTUNE_STATE): restored at start when the file exists or
//     TORCHELASTIC_RESTART_COUNT > 0 (a corrupt or foreign file is reported once and ignored),
//     offered to the tuner with a "restored" refit so the first recommendation uses the earlier
//     measurements, merged into every later snapshot; saved (write-then-rename) on each refit and
//     at Finish.
// On every rank: per-rank step/compute times gathered to rank 0 every CLOUDTUNE_STRAGGLER_EVERY
// steps (see OnlineStepTimes) when world_size > 1.
// On every rank: the preemption watcher when CLOUDTUNE_PREEMPTION_URL is set (each node polls its
// own instance metadata); a notice raises the flag Plugin::ShouldCheckpoint() returns, and on rank
// 0 writes a `preemption` record and asks the tuner for the remaining fleet's configuration.
//
// Nothing here throws into the training loop; a piece that cannot start logs one line and the
// rest goes on.
#pragma once

#include <cstdint>
#include <memory>

namespace cloudtune::plugin {

class Plugin;
class Online;

// Starts the online pieces for `plugin` (already started and enabled; any rank). Returns null when
// there is nothing to run on this rank. Installs the plugin's observer on rank 0.
std::shared_ptr<Online> StartOnline(Plugin* plugin);
// Stops everything (joins the threads) and saves the final state; call on the training thread
// before the sidecar is closed. Removes the observer. Idempotent; `online` may be null.
void StopOnline(Plugin* plugin, Online* online);
// Whether a preemption notice was seen (lock-free). False for null.
bool OnlineShouldCheckpoint(const Online* online);
// Training thread, every rank, once per optimizer step: the step's times in seconds (step_time < 0:
// not timed). O(1); every CLOUDTUNE_STRAGGLER_EVERY steps the window's means are handed to a
// background thread that publishes them in the job's c10d store (MASTER_ADDR:MASTER_PORT); rank 0
// gathers every rank's window there and feeds service::StragglerDetector (`straggler` records,
// the slowdown factor in the tuner's snapshots). No-op for null.
void OnlineStepTimes(Online* online, int64_t step, double step_time, double compute_time);

}  // namespace cloudtune::plugin
