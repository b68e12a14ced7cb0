// Fuzzes the instance catalog parser (search::ParseInstances) against the embedded GPU specs, the
// way a user catalog (CLOUDTUNE_CATALOG, --catalog) is read. Bad input must end in InputError.
#include <cstddef>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>

#include "estimator/core/error.h"
#include "search/catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto& gpus = cloudtune::search::DefaultCatalog().gpus;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::map<std::string, cloudtune::search::GpuSpec> added;  // GPUs the rows give figures for
  try {
    cloudtune::search::ParseInstances(in, "fuzz.csv", gpus, {}, &added);
  } catch (const cloudtune::InputError&) {
  }
  return 0;
}
