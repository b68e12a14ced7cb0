#!/usr/bin/env bash
# ThreadSanitizer run of the runtime's threaded parts (docs/robustness.md): builds the torch-free
# code with CLOUDTUNE_SANITIZE=thread into build-tsan/ and runs the tests of the background executor,
# the HTTP server, the preemption watcher, the straggler exchange and the sidecar writer.
#   scripts/tsan.sh [TEST ...]      default: the five tests below
set -euo pipefail
cd "$(dirname "$0")/.."
tests=("$@")
[ ${#tests[@]} -eq 0 ] &&
  tests=(tuner_test http_server_test preemption_test straggler_test sidecar_test)
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DCLOUDTUNE_TORCH=OFF \
  -DCLOUDTUNE_SANITIZE=thread -DCLOUDTUNE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-tsan -j"$(nproc)" --target "${tests[@]}"
# halt_on_error: the first race fails the test; second_deadlock_stack: both stacks of a lock cycle.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"
# Newer kernels randomise mmap more than TSan's shadow layout allows: run without ASLR if we can.
run=()
setarch "$(uname -m)" -R true 2>/dev/null && run=(setarch "$(uname -m)" -R)
failed=()
for t in "${tests[@]}"; do
  echo "tsan: $t"
  "${run[@]}" "build-tsan/bin/$t" --gtest_brief=1 || failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "tsan: ${#failed[@]} of ${#tests[@]} tests failed: ${failed[*]}"
  exit 1
fi
echo "tsan: all ${#tests[@]} tests passed"
