// Errors raised on bad input (trace CSV, model JSON, catalog, scenario, arguments).
#pragma once

#include <stdexcept>
#include <string>

namespace cloudtune {

// Bad input. what() names the source and position, e.g. "trace.csv:12:3: step_time: 'abc' is not
// a number". Thrown by readers; caught at the edges (CLI main, plugin), never in the training loop.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cloudtune
