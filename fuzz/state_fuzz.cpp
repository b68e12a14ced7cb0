// Fuzzes the saved-state reader (CLOUDTUNE_STATE, plugin/runtime/state.h) two ways:
//  - the bytes as a state file through LoadState, which must never throw (a restarted job relies on
//    a corrupt file being reported and ignored);
//  - the bytes as JSON through SavedState::FromJson (past the checksum LoadState checks first),
//    whose only failure is InputError; what it accepts must load again after ToJson.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "estimator/core/error.h"
#include "plugin/runtime/state.h"

namespace {

// One scratch file for the whole run, removed at exit.
const std::string& StatePath() {
  static const std::string path = [] {
    char dir[] = "/tmp/cloudtune-state-fuzz-XXXXXX";
    if (!::mkdtemp(dir)) std::abort();
    static std::string d = dir;
    std::atexit([] {
      std::remove((d + "/state.json").c_str());
      ::rmdir(d.c_str());
    });
    return d + "/state.json";
  }();
  return path;
}

void FromJson(const nlohmann::json& j) {
  using cloudtune::runtime::SavedState;
  try {
    const SavedState s = SavedState::FromJson(j, "fuzz");
    SavedState::FromJson(s.ToJson(), "fuzz (round trip)");  // must not throw
  } catch (const cloudtune::InputError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(StatePath(), std::ios::binary | std::ios::trunc);
    out << text;
  }
  cloudtune::runtime::LoadState(StatePath(), "");
  cloudtune::runtime::LoadState(StatePath(), "job-42");

  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  FromJson(j);
  if (j.is_object() && j.contains("state")) FromJson(j["state"]);  // a whole state file
  return 0;
}
