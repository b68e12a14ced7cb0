#!/bin/bash
# Interleaved A/B timing of two bench_fit binaries (e.g. a build of an older commit against this
# one): this machine's speed drifts over minutes, so the two are run in alternation and compared
# by the ratio of their medians. With valgrind installed, also counts the instructions of one
# fit (callgrind, deterministic).
#   scripts/bench_fit_ab.sh OLD/bench_fit NEW/bench_fit [ARGS=1000/1] [ROUNDS=5]
# ARGS is bench_fit's "configurations/uncertainty" pair (10/1, 100/1, 1000/1, 1000/0).
set -euo pipefail
old=$1 new=$2 args=${3:-1000/1} rounds=${4:-5}
for ((r = 0; r < rounds; r++)); do
  for bin in "$old" "$new"; do
    "$bin" --benchmark_filter="^BM_FitThroughput/$args\$" --benchmark_repetitions=5 \
      --benchmark_format=csv 2>/dev/null | grep '^"BM_' | grep -v '_mean\|_median\|_stddev\|_cv' |
      awk -F, -v b="$bin" '{print b, $4}'
  done
done | python3 -c '
import statistics as st, sys
d = {}
for line in sys.stdin:
    b, v = line.split()
    d.setdefault(b, []).append(float(v))
o, n = d[sys.argv[1]], d[sys.argv[2]]
print("%s: old min %.2f median %.2f ms | new min %.2f median %.2f ms | median ratio %.2f (n=%d each)"
      % (sys.argv[3], min(o), st.median(o), min(n), st.median(n), st.median(o) / st.median(n), len(n)))
' "$old" "$new" "$args"
if command -v valgrind >/dev/null; then
  for bin in "$old" "$new"; do
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      "--toggle-collect=cloudtune::estimator::FitThroughput*" "$bin" \
      --benchmark_filter="^BM_FitThroughput/$args\$" --benchmark_min_time=0.000001 >/dev/null 2>&1
    echo "$bin: $(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {print $1; exit}') instructions in one fit"
    rm -f "$out"
  done
fi
