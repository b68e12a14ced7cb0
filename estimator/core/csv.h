// Small CSV helpers shared by every reader (traces, validation traces, the instance catalog), so
// that all of them report bad input the same way: "FILE:LINE:COL: column: what".
#pragma once

#include <string>
#include <vector>

namespace cloudtune::core::csv {

// `s` without leading and trailing blanks (space, tab, CR, LF).
std::string Trim(const std::string& s);

// Splits one CSV line into trimmed fields. Double-quoted fields may hold commas and "" escapes.
std::vector<std::string> Split(const std::string& line);

// Throws cloudtune::InputError("name:line:col: what"); col <= 0 leaves the column out.
[[noreturn]] void Fail(const std::string& name, int line, int col, const std::string& what);

// A finite number; negative values are rejected unless allow_negative. Errors name the position
// and the column: "t.csv:2:3: step_time: 'abc' is not a finite number".
double Number(const std::string& v, const std::string& name, int line, int col,
              const std::string& column, bool allow_negative = false);

// A non-negative integer that is at least min_value.
int Count(const std::string& v, const std::string& name, int line, int col,
          const std::string& column, int min_value);

}  // namespace cloudtune::core::csv
