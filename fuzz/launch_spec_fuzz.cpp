// Fuzzes `cloudtune launch-spec`'s reading of a recommendation (cli/launch_spec.h): the bytes as a
// JSON document through PlanFromRecommendation, whose only failure is InputError; a plan it accepts
// must render in all three formats, and the YAML it writes must parse back with yaml-cpp.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/launch_spec.h"
#include "estimator/core/error.h"
#include "search/catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  cloudtune::cli::LaunchPlan plan;
  try {
    plan = cloudtune::cli::PlanFromRecommendation(doc, "fuzz", cloudtune::search::DefaultCatalog());
  } catch (const cloudtune::InputError&) {
    return 0;
  }
  cloudtune::cli::LaunchSpecOptions o;
  o.image = "img";
  try {
    (void)YAML::Load(cloudtune::cli::SkyPilotTaskYaml(plan, o));
    (void)YAML::Load(cloudtune::cli::PyTorchJobYaml(plan, o));
    (void)cloudtune::cli::TorchrunCommand(plan, o);
  } catch (const cloudtune::InputError&) {
    // Only the documented refusal (elastic bounds of an odd plan); anything else escapes: a finding.
  }
  return 0;
}
