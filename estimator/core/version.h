// The build's version: `git describe --always --dirty` of the source tree at configure time, or the
// CMake project version where the tree is no git checkout (a release tarball). Generated into
// ${CMAKE_BINARY_DIR}/generated/version.cpp from estimator/core/version.cpp.in.
#pragma once

namespace cloudtune::core {

// E.g. "v0.1.0-12-gabc1234-dirty" or "0.1.0". Never null, never empty.
const char* Version();

}  // namespace cloudtune::core
