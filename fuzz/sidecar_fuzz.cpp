// Fuzzes the reader of what a job recorded (cli/sidecar_reader.h): the bytes as a JSON Lines
// sidecar through ReadSidecar and InputsFromSidecar, and as a state file through IsStateFile and
// InputsFromState. A killed job leaves damaged files behind, so the only failure allowed is
// InputError (IsStateFile never throws).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli/sidecar_reader.h"
#include "estimator/core/error.h"

namespace {

const std::string& ScratchPath() {
  static const std::string path = [] {
    char dir[] = "/tmp/cloudtune-sidecar-fuzz-XXXXXX";
    if (!::mkdtemp(dir)) std::abort();
    static std::string d = dir;
    std::atexit([] {
      std::remove((d + "/job.sidecar.jsonl").c_str());
      ::rmdir(d.c_str());
    });
    return d + "/job.sidecar.jsonl";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace cli = cloudtune::cli;
  const std::string& path = ScratchPath();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  if (cli::IsStateFile(path)) {
    try {
      cli::InputsFromState(path);
    } catch (const cloudtune::InputError&) {
    }
    return 0;
  }
  try {
    const cli::Sidecar s = cli::ReadSidecar(path);
    s.Problems();
    cli::InputsFromSidecar(s);
  } catch (const cloudtune::InputError&) {
  }
  return 0;
}
