#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan+UBSan) into build-fuzz/ and runs each one over its
# seed corpus (fuzz/corpus/<target>/) for a bounded time. docs/robustness.md explains the targets.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET ...]]     default: 60 seconds, every target
#
# The corpus is copied to a temporary directory first, so the inputs a run discovers do not grow the
# repository. A crashing input is written to build-fuzz/crashes/<target>/ (add it to the corpus once
# the parser is fixed). Exit status 1 when any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(trace_fuzz validation_trace_fuzz catalog_fuzz scenario_fuzz state_fuzz http_request_fuzz
           launch_spec_fuzz)
  [ -f cli/sidecar_reader.cpp ] && targets+=(sidecar_fuzz)
fi
build="${CLOUDTUNE_FUZZ_BUILD_DIR:-build-fuzz}"

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DCLOUDTUNE_FUZZ=ON -DCLOUDTUNE_TORCH=OFF \
  -DCLOUDTUNE_SANITIZE=address,undefined -DCLOUDTUNE_BUILD_TESTS=OFF \
  -DCLOUDTUNE_BUILD_BENCHMARKS=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
failed=()
for t in "${targets[@]}"; do
  cp -r "fuzz/corpus/$t" "$work/$t"
  mkdir -p "$build/crashes/$t"
  start=$(date +%s)
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a blow-up is a finding too.
  if "$build/bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/crashes/$t/" "$work/$t" >"$work/$t.log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$' || true)
    echo "fuzz: $t ok: ${runs:-?} inputs in $(($(date +%s) - start)) s," \
      "corpus $(ls "fuzz/corpus/$t" | wc -l) -> $(ls "$work/$t" | wc -l)"
  else
    echo "fuzz: $t FAILED (inputs in $build/crashes/$t/):"
    grep -E -A30 '^==[0-9]+==ERROR|runtime error|uncaught exception|deadly signal' "$work/$t.log" |
      head -60 || tail -40 "$work/$t.log"
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets passed (${secs} s each)"
