// The one JSON file reader: every JSON input (scenario, model, efficiency model, state, catalog
// rows) is read through it, so all report a missing file or bad JSON the same way.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cloudtune::core {

// Parses the file at `path`. Throws cloudtune::InputError "PATH: cannot open" or
// "PATH: not valid JSON (corrupt or truncated at byte N): <parser message>".
nlohmann::json ReadJsonFile(const std::string& path);

// Parses `text` read from `source` (named in the error).
nlohmann::json ParseJson(const std::string& text, const std::string& source);

}  // namespace cloudtune::core
