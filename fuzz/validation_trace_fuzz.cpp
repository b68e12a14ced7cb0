// Fuzzes the validation-trace CSV reader (estimator::ParseValidationTrace). Bad input must end in
// InputError, and what it accepts must be finite (the drift fit uses these numbers as they are).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "estimator/core/error.h"
#include "estimator/efficiency.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    double max_progress = 0;
    const auto obs = cloudtune::estimator::ParseValidationTrace(in, "fuzz.csv", 128, &max_progress);
    for (const auto& o : obs) {
      if (!(std::isfinite(o.progress) && o.progress >= 0 && o.progress <= max_progress &&
            std::isfinite(o.grad_sqr) && std::isfinite(o.grad_var)))
        std::abort();  // accepted an observation the fit cannot use
    }
  } catch (const cloudtune::InputError&) {
  }
  return 0;
}
