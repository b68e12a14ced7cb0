// The one reader of the process environment. Every setting that comes from an environment
// variable, the CLOUDTUNE_* options and the launcher's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// TORCHELASTIC_RESTART_COUNT, is read here, once at start-up, into a value that is passed on.
// estimator/ and search/ never read the environment themselves.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace cloudtune::core {

// Looks a variable up: returns its value or null. Tests pass a map-backed lookup.
using EnvLookup = std::function<const char*(const char*)>;

// The value of `name` (through `lookup`; empty = the process environment), or nullopt when unset.
std::optional<std::string> GetEnv(const std::string& name, const EnvLookup& lookup = {});

// What the launcher (torchrun / torch elastic, or a hand-written launcher) says about this
// process. -1 (or "" / 0) = not set.
struct LaunchEnv {
  int rank = -1;              // RANK
  int world_size = -1;        // WORLD_SIZE
  int local_rank = -1;        // LOCAL_RANK
  int local_world_size = -1;  // LOCAL_WORLD_SIZE: processes (GPUs) on this machine
  int group_rank = -1;        // GROUP_RANK: this machine's index
  int group_world_size = -1;  // GROUP_WORLD_SIZE: machines (torch elastic)
  std::string master_addr;    // MASTER_ADDR ("" = unset)
  int master_port = 0;        // MASTER_PORT (0 = unset)
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT (0 = first start)
  std::string run_id;         // TORCHELASTIC_RUN_ID ("" = unset)
  // TORCHELASTIC_USE_AGENT_STORE=True: the store at MASTER_PORT is the agent's (torchrun's static
  // rendezvous), which outlives a restart of the workers; every rank is its client.
  bool agent_store = false;

  // Reads the variables; values that are not non-negative integers are treated as unset.
  static LaunchEnv Read(const EnvLookup& lookup = {});
  // Where this attempt's keys live in the job's store: "/worker/attempt_<restart_count>" in the
  // agent's store (the prefix torch's own env:// rendezvous gives them, so that an attempt never
  // reads the keys of the one before), "" otherwise (rank 0 serves a new store each attempt).
  std::string AttemptPrefix() const;
  // Machines the job spans: GROUP_WORLD_SIZE, else world_size / LOCAL_WORLD_SIZE when that
  // divides evenly, else 1.
  int NumNodes(int world_size) const;
};

}  // namespace cloudtune::core
