#!/usr/bin/env bash
# Command (2) of the README: install, build, run every test; then the torch-free parts again under
# ASan+UBSan, and a short fuzz smoke run of every parser (docs/robustness.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache may share objects between build dirs (and clones): the sanitizer and fuzz builds use -g.
export CCACHE_NOHASHDIR=1
bash scripts/install-deps.sh
bash scripts/build.sh
rc=0
(cd build && ctest --output-on-failure -j2 --timeout 900) || rc=1

# Sanitizers: the torch-free libraries, the CLI and their tests, built apart into build-asan/.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DCLOUDTUNE_TORCH=OFF \
  -DCLOUDTUNE_SANITIZE=address,undefined -DCLOUDTUNE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
(cd build-asan && ctest --output-on-failure -j2 --timeout 900 -LE style) || rc=1

# Fuzz smoke: each fuzzer replays its seed corpus, then mutates it for a few seconds.
bash scripts/fuzz.sh 5 || rc=1
exit $rc
