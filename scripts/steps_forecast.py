#!/usr/bin/env python3
"""How well `cloudtune steps` forecasts along progress: a run observed up to part of its way.

usage: steps_forecast.py [--cli build/bin/cloudtune] [--fractions 0.02,0.05,...] [--cases]
                         [--require-2sigma PCT] MODEL_DIR [...]

shared/eval/steps_accuracy.py observes whole runs and predicts other batch sizes. A live job sees
less: its own run, at its batch, up to the progress it has made. Each MODEL_DIR holds
validation-<B>.csv files (progress,iteration,metric,grad_sqr,grad_var; progress in steps at the
folder's smallest batch B0). For every run at batch B and every fraction f, the rows up to f of the
run's final progress are given to the tool (`--base-batch B0`), which forecasts the steps from
there to the end at B, 2B and 4B; the truth is the steps the run at that batch took over the same
stretch of progress (its `iteration` column, interpolated linearly in progress). The noise ratio's
growth beyond the observed progress is then a forecast, which the batch-size evaluation never
asks for.

Prints, per model and batch ratio, the rms and mean log error (positive: more steps forecast than
taken) and the shares of truths within 1 and 2 of the stated log_sigma (68 / 95 % if calibrated),
then the same over everything. Standard library only.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

from steps_calibration import runs as validation_runs


def runs(folder):
    """{B: (rows, [(progress, iteration)])} of the folder's validation-<B>.csv."""
    return {b: (rows, [(float(r["progress"]), float(r["iteration"])) for r in rows])
            for b, (_, rows) in validation_runs(folder).items()}


def iteration_at(points, p):
    prev_p, prev_i = 0.0, 0.0
    for q, i in points:
        if q >= p:
            return prev_i + (i - prev_i) * (p - prev_p) / (q - prev_p) if q > prev_p else i
        prev_p, prev_i = q, i
    return points[-1][1]


def within(cases, k):
    return 100 * sum(abs(x) <= k * s for x, s in cases) / len(cases)


def summary(label, cases):
    if not cases:
        return
    e = [c[0] for c in cases]
    rms = math.sqrt(sum(x * x for x in e) / len(e))
    print("%-22s n %4d  rms log error %.3f  mean %+.3f  within 1 sigma %3.0f%%  2 sigma %3.0f%%"
          % (label, len(cases), rms, sum(e) / len(e), within(cases, 1), within(cases, 2)),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="build/bin/cloudtune")
    ap.add_argument("--fractions", default="0.02,0.03,0.05,0.07,0.1,0.15,0.2,0.3,0.4,0.5,0.6,0.7,0.8")
    ap.add_argument("--cases", action="store_true", help="also print every forecast")
    ap.add_argument("--require-2sigma", type=float, default=0,
                    help="exit 1 when fewer than this share (%%) of all truths lie within 2 sigma;"
                         " exit 77 when a model folder is absent (a test's skip)")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    fractions = [float(f) for f in a.fractions.split(",")]
    if a.require_2sigma and not all(os.path.isdir(m) for m in a.models):
        print("skipped: a model folder is absent (the shared data?)")
        sys.exit(77)
    everything = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder in a.models:
            rs = runs(folder)
            if not rs:
                raise RuntimeError("%s: no validation-<B>.csv" % folder)
            b0 = min(rs)
            name = os.path.basename(folder.rstrip("/"))
            by_ratio = {1: [], 2: [], 4: []}
            for b, (rows, points) in rs.items():
                header = list(rows[0].keys())
                for f in fractions:
                    cut = f * points[-1][0]
                    seen = [r for r in rows if float(r["progress"]) <= cut]
                    if len(seen) < 2:
                        continue
                    trunc = os.path.join(tmp, "seen.csv")
                    with open(trunc, "w", newline="") as out:
                        w = csv.DictWriter(out, fieldnames=header)
                        w.writeheader()
                        w.writerows(seen)
                    for ratio in by_ratio:
                        if b * ratio not in rs:
                            continue
                        other = rs[b * ratio][1]
                        end = 0.999 * min(points[-1][0], other[-1][0])
                        truth = iteration_at(other, end) - iteration_at(other, cut)
                        args = [a.cli, "steps", "--observed", "%d=%s" % (b, trunc),
                                "--base-batch", str(b0), "--batch", str(b * ratio),
                                "--progress", repr(end), "--from-progress", repr(cut),
                                "--extrapolate", "1e6"]
                        r = subprocess.run(args, capture_output=True, text=True)
                        if r.returncode != 0:
                            raise RuntimeError("cloudtune steps failed: " + r.stderr.strip()[-500:])
                        out = json.loads(r.stdout)
                        case = (math.log(float(out["iterations"]) / truth), float(out["log_sigma"]))
                        by_ratio[ratio].append(case)
                        if a.cases:
                            print("%-10s B=%-6d f=%.2f x%d forecast %9.0f truth %9.0f log error %+.3f"
                                  " sigma %.3f" % (name, b, f, ratio, float(out["iterations"]),
                                                   truth, case[0], case[1]))
                        everything.append(case)
            if not any(by_ratio.values()):
                print("%-22s no case: every cut leaves fewer than two rows" % name)
            for ratio, cases in by_ratio.items():
                summary("%s %dx" % (name, ratio), cases)
    summary("all", everything)
    if a.require_2sigma:
        share = within(everything, 2) if everything else 0
        print("%s: %.0f%% within 2 sigma (at least %.0f%% required)"
              % ("PASS" if share >= a.require_2sigma else "FAIL", share, a.require_2sigma))
        if share < a.require_2sigma:
            sys.exit(1)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError, KeyError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
