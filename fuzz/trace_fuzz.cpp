// Fuzzes the trace CSV reader (estimator::ParseTrace). Bad input must end in InputError, and what
// it accepts must be a usable measurement (the fits divide by these times).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "estimator/core/error.h"
#include "estimator/core/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto ms = cloudtune::estimator::ParseTrace(in, "fuzz.csv");
    for (const auto& m : ms) {
      if (!(std::isfinite(m.step_time) && m.step_time > 0 && m.sync_time >= 0 &&
            m.sync_time < m.step_time && m.key.num_nodes >= 1 &&
            m.key.num_replicas >= m.key.num_nodes && m.key.local_bsz >= 1))
        std::abort();  // accepted a configuration no model can use
    }
    // What was accepted must round-trip through the writer.
    std::ostringstream out;
    cloudtune::estimator::WriteTrace(out, ms);
  } catch (const cloudtune::InputError&) {
  }
  return 0;
}
