// Small time helpers shared by the service's .cpp files (internal; not part of the plugin API).
#pragma once

#include <string>

namespace cloudtune::runtime::detail {

// The current wall-clock time as UTC ISO 8601 with second resolution, e.g. "2026-11-21T22:02:00Z".
std::string UtcNow();

}  // namespace cloudtune::runtime::detail
