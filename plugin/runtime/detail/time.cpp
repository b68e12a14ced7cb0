#include "plugin/runtime/detail/time.h"

#include <ctime>

namespace cloudtune::runtime::detail {

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace cloudtune::runtime::detail
