// Scenarios the replay's tests vary: the shipped ones, hand-made spot capacity traces, and the
// message a malformed scenario gets.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/replay/replay.h"
#include "estimator/core/error.h"

namespace cloudtune::replay::fixtures {

inline const std::string kScenarios = std::string(CLOUDTUNE_SOURCE_DIR) + "/data/scenarios";

// The message ParseScenario gives `j` (read as s.json beside the shipped scenarios); "" if none.
inline std::string ErrorOf(const nlohmann::json& j) {
  try {
    ParseScenario(j, "s.json", kScenarios);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A spot capacity trace of 600-s ticks in the temporary directory: the counts `head`, then 500
// ticks of 2 nodes.
inline std::string CapacityTrace(const std::string& name, const std::string& head) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream f(path);
  f << R"({"metadata": {"gap_seconds": 600}, "data": [)" << head;
  for (int i = 0; i < 500; ++i) f << ", 2";
  f << "]}";
  return path;
}

// The shipped cifar10 scenario on g4dn.12xlarge, as JSON to vary.
inline nlohmann::json Base() {
  std::ifstream f(kScenarios + "/pollux-cifar10-g4dn.json");
  nlohmann::json j;
  f >> j;
  return j;
}

// Base() with the g4dn.12xlarge spot capacity of CapacityTrace(name, head), read as counts.
inline Scenario WithCapacity(const std::string& name, const std::string& head) {
  nlohmann::json j = Base();
  j["spot"] = {{"reading", "count"},
               {"offset_h", 0},
               {"traces", {{"g4dn.12xlarge", CapacityTrace(name, head)}}}};
  return ParseScenario(j, name, kScenarios);
}

}  // namespace cloudtune::replay::fixtures
