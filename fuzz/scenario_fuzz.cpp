// Fuzzes the replay scenario parser (replay::ParseScenario). The scenario's paths resolve against
// a scratch directory that holds one small trace (t.csv), validation traces (v.csv; w.csv and
// x.csv, whose metric falls) and spot capacity traces (a.json, b.json), so a scenario naming them
// gets past the file reads into the rest of the parser; other names exercise the missing-file
// errors. Bad input must end in InputError.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli/replay/replay.h"
#include "estimator/core/error.h"

namespace {

const std::string& BaseDir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/cloudtune-scenario-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    static std::string d = tmpl;
    std::ofstream(d + "/t.csv") << "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
                                   "1,4,32,0.0582,0.0143\n1,4,64,0.0684,0.0074\n"
                                   "2,8,32,0.0921,0.0402\n";
    std::ofstream(d + "/v.csv") << "progress,iteration,metric,grad_sqr,grad_var\n"
                                   "391.0,390,0.4455,8.947,5.066\n782.0,781,0.6007,1.895,1.592\n";
    // A metric that falls (an error rate): w.csv at batch 128, x.csv at 256.
    std::ofstream(d + "/w.csv") << "progress,iteration,metric,grad_sqr,grad_var\n"
                                   "391.0,390,55.4,8.947,5.066\n782.0,781,39.9,1.895,1.592\n";
    std::ofstream(d + "/x.csv") << "progress,iteration,metric,grad_sqr,grad_var\n"
                                   "391.0,196,58.1,8.947,5.066\n782.0,391,41.2,1.895,1.592\n";
    // Spot capacity of two zones.
    std::ofstream(d + "/a.json") << R"({"metadata": {"gap_seconds": 600}, "data": [2, 0, 2]})";
    std::ofstream(d + "/b.json") << R"({"metadata": {"gap_seconds": 600}, "data": [0, 2, 1]})";
    std::atexit([] {
      std::remove((d + "/t.csv").c_str());
      std::remove((d + "/v.csv").c_str());
      std::remove((d + "/w.csv").c_str());
      std::remove((d + "/x.csv").c_str());
      std::remove((d + "/a.json").c_str());
      std::remove((d + "/b.json").c_str());
      ::rmdir(d.c_str());
    });
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Device and proc files (an endless /dev/zero) are not parser input: skip such paths.
  if (text.find("dev/") != std::string::npos || text.find("proc/") != std::string::npos) return 0;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    cloudtune::replay::ParseScenario(j, "fuzz.json", BaseDir());
  } catch (const cloudtune::InputError&) {
  }
  return 0;
}
