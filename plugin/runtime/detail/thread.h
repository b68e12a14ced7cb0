// Names of the plugin's background threads (internal; not part of the plugin API). Every thread
// the runtime starts is named "ct-<role>" so that `top -H`, a debugger and the overhead benchmark
// can tell the plugin's own CPU time from the training job's.
#pragma once

#include <string>
#include <vector>

namespace cloudtune::runtime::detail {

// Prefix of every plugin thread's name.
inline constexpr const char* kThreadPrefix = "ct-";

// Names the calling thread kThreadPrefix + role (Linux keeps 15 characters). No-op elsewhere.
void NameThisThread(const char* role);

struct ThreadCpu {
  std::string name;
  double cpu_seconds = 0;  // user + system CPU time so far
};
// Every thread of this process with its name and CPU time, from /proc/self/task (Linux; empty
// elsewhere or when /proc cannot be read).
std::vector<ThreadCpu> ProcessThreadsCpu();

}  // namespace cloudtune::runtime::detail
