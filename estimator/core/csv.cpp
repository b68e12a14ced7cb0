#include "estimator/core/csv.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "estimator/core/error.h"

namespace cloudtune::core::csv {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> Split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(Trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(Trim(cur));
  return out;
}

void Fail(const std::string& name, int line, int col, const std::string& what) {
  std::ostringstream os;
  os << name << ":" << line;
  if (col > 0) os << ":" << col;
  os << ": " << what;
  throw InputError(os.str());
}

double Number(const std::string& v, const std::string& name, int line, int col,
              const std::string& column, bool allow_negative) {
  if (v.empty()) Fail(name, line, col, column + ": empty value");
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || !std::isfinite(d))
    Fail(name, line, col, column + ": '" + v + "' is not a finite number");
  if (!allow_negative && d < 0) Fail(name, line, col, column + ": " + v + " is negative");
  return d;
}

int Count(const std::string& v, const std::string& name, int line, int col,
          const std::string& column, int min_value) {
  double d = Number(v, name, line, col, column);
  if (d != std::floor(d) || d > std::numeric_limits<int>::max())
    Fail(name, line, col, column + ": '" + v + "' is not an integer");
  if (d < min_value)
    Fail(name, line, col, column + ": " + v + " must be at least " + std::to_string(min_value));
  return static_cast<int>(d);
}

}  // namespace cloudtune::core::csv
