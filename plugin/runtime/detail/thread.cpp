#include "plugin/runtime/detail/thread.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#ifdef __linux__
#include <pthread.h>
#endif

namespace cloudtune::runtime::detail {

void NameThisThread(const char* role) {
#ifdef __linux__
  const std::string name = (std::string(kThreadPrefix) + role).substr(0, 15);
  pthread_setname_np(pthread_self(), name.c_str());
#else
  (void)role;
#endif
}

std::vector<ThreadCpu> ProcessThreadsCpu() {
  std::vector<ThreadCpu> out;
#ifdef __linux__
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    ThreadCpu t;
    std::ifstream comm(task.path() / "comm");
    std::getline(comm, t.name);
    std::ifstream stat(task.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // Fields after the parenthesised name (which may contain spaces): state is field 3,
    // utime and stime are fields 14 and 15.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    t.cpu_seconds = tick > 0 ? (utime + stime) / tick : 0;
    out.push_back(std::move(t));
  }
#endif
  return out;
}

}  // namespace cloudtune::runtime::detail
