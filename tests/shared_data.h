// The project's shared data (real traces nobody on this team measured: `../shared/data` beside the
// checkout, or $CLOUDTUNE_SHARED_DIR). The repository's own build and tests never need it: a test
// that reads it starts with CLOUDTUNE_NEEDS_SHARED_DATA(), which skips the test with a message
// naming the missing folder when the data is absent.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace cloudtune::test {

inline std::string SharedDir() {
  if (const char* d = std::getenv("CLOUDTUNE_SHARED_DIR")) return d;
  return CLOUDTUNE_SHARED_DIR;
}

inline bool HaveSharedData() {
  std::error_code ec;
  return std::filesystem::is_directory(SharedDir() + "/data/traces", ec);
}

}  // namespace cloudtune::test

#define CLOUDTUNE_NEEDS_SHARED_DATA()                                                             \
  if (!::cloudtune::test::HaveSharedData())                                                       \
  GTEST_SKIP() << "needs the project's shared data, absent at " << ::cloudtune::test::SharedDir() \
               << "/data (set CLOUDTUNE_SHARED_DIR)"
