#!/usr/bin/env bash
# Re-measures the quality and speed figures reported in docs/results.md, from the repo root, with
# the binaries in build/ (run scripts/build.sh first). Writes everything to stdout.
# REPLAY_SETS_DIR: where scripts/replay_sets.py writes the replay sets (default: a new temp dir).
set -uo pipefail
cd "$(dirname "$0")/.."
B=build/bin
echo "== throughput fit accuracy (Pollux T4)"
python3 ../shared/eval/fit_accuracy.py --cli $B/cloudtune --pollux ../shared/data/traces/pollux-t4
echo "== throughput fit accuracy (Gavel, converted by scripts/gavel_to_trace.py)"
sets=()
for f in data/traces/gavel/*.csv; do sets+=("$(basename "$f" .csv)=$f"); done
python3 ../shared/eval/fit_accuracy.py --cli $B/cloudtune "${sets[@]}"
echo "== steps accuracy"
python3 ../shared/eval/steps_accuracy.py --cli $B/cloudtune ../shared/data/traces/pollux-t4/{cifar10,imagenet,bert,ncf}
echo "== steps forecast along progress (a run observed part of its way)"
python3 scripts/steps_forecast.py --cli $B/cloudtune ../shared/data/traces/pollux-t4/{cifar10,imagenet,bert,ncf}
echo "== replay"
$B/cloudtune replay data/scenarios/*.json
echo "== replay sets (docs/results.md, Where things stand; about 20 minutes on 2 cores)"
R="${REPLAY_SETS_DIR:-$(mktemp -d)}"
python3 scripts/replay_sets.py "$R" --cli $B/cloudtune
python3 scripts/replay_sets.py "$R" --cli $B/cloudtune --held-out
echo "== benchmarks"
$B/bench_fit --benchmark_min_time=0.5
$B/bench_fit_memory
echo "== uncertainty: coverage, variance or tails (scripts/calibration.py); trace key scatter"
python3 scripts/fit_uncertainty_coverage.py --cli $B/cloudtune --pollux ../shared/data/traces/pollux-t4
for s in rtx quad; do
  python3 scripts/fit_uncertainty_coverage.py --cli $B/cloudtune --pollux ../shared/data/traces/sia --suffix=-$s
done
D=../shared/data/traces
python3 scripts/cross_type_seen.py --cli $B/cloudtune --seen k1,k2 t4=$D/pollux-t4: rtx=$D/sia:-rtx quad=$D/sia:-quad |
  grep -E '^(seen|shape)'
python3 scripts/steps_calibration.py --cli $B/cloudtune $D/pollux-t4/{cifar10,imagenet,bert,ncf}
python3 scripts/trace_key_scatter.py --pollux ../shared/data/traces/pollux-t4
for s in rtx quad; do python3 scripts/trace_key_scatter.py --pollux $D/sia --suffix=-$s; done
$B/bench_search
[ -x $B/bench_efficiency ] && $B/bench_efficiency
[ -x $B/bench_tuner ] && $B/bench_tuner
[ -x $B/bench_overhead ] && $B/bench_overhead
exit 0
