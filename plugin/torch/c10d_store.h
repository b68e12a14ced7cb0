// The job's own c10d store (the TCPStore its process group rendezvoused on, at
// MASTER_ADDR:MASTER_PORT) as the runtime's cross-rank key-value store. The only place the
// runtime's cross-process coordination touches torch.
#pragma once

#include <memory>
#include <string>

#include "estimator/core/env.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune::plugin {

// Connects a client to the job's store (at most 5 s; a Get waits at most 30 s), its keys under
// launch.AttemptPrefix(). Returns null with the reason in *error when it cannot.
std::shared_ptr<runtime::KeyValueStore> ConnectJobStore(const core::LaunchEnv& launch,
                                                        std::string* error);

}  // namespace cloudtune::plugin
