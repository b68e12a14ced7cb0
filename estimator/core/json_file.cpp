#include "estimator/core/json_file.h"

#include <fstream>
#include <sstream>

#include "estimator/core/error.h"

namespace cloudtune::core {

nlohmann::json ParseJson(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(source + ": not valid JSON (corrupt or truncated at byte " +
                     std::to_string(e.byte) + "): " + e.what());
  } catch (const nlohmann::json::exception& e) {
    // The grammar holds but a value does not fit (a number beyond double's range: 8e888...).
    throw InputError(source + ": not valid JSON: " + e.what());
  }
}

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseJson(ss.str(), path);
}

}  // namespace cloudtune::core
