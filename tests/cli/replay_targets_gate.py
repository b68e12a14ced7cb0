#!/usr/bin/env python3
"""CTest gate: replay the shipped scenarios and fail when a target of the replay is missed.

usage: replay_targets_gate.py --cli CLOUDTUNE --scenarios DIR [--median X] [--p90 X]
                              [--saving-on-demand F] [--saving-spot F]
Replays every DIR/*.json over its own seeds (`cloudtune replay ... --format json`) and checks
the summary: cloudtune's cost / the hindsight oracle's, median and p90; no deadline or budget
missed that the oracle met; the median saving against fixed on demand and against fixed spot
with restarts (fractions); Uniform Progress never meeting a deadline cloudtune missed and costing
more at the median. Exit 0 when all hold, 1 when one does not (or the replay failed), 77 (CTest
"skipped") when the scenarios' shared data is not there.
"""
import argparse
import glob
import json
import os
import subprocess
import sys


def named_files(s):
    """The data files a scenario names: step-time traces, validation runs, noise, spot capacity."""
    for t in s.get("traces", []):
        yield from t.get("csv", [])
    yield from s.get("validation", {}).values()
    if "validation_csv" in s.get("noise", {}):
        yield s["noise"]["validation_csv"]
    for market in s.get("spot", {}).get("traces", {}).values():
        yield from (market.values() if isinstance(market, dict) else [market])


def shared_data_present(scenarios):
    """Whether every data file the scenarios name (relative to the scenario file) exists."""
    for path in scenarios:
        with open(path) as f:
            s = json.load(f)
        base = os.path.dirname(os.path.abspath(path))
        for name in named_files(s):
            if isinstance(name, str) and not os.path.exists(os.path.join(base, name)):
                return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--scenarios", required=True, help="folder of scenario JSON files")
    ap.add_argument("--median", type=float, default=1.10)
    ap.add_argument("--p90", type=float, default=1.25)
    ap.add_argument("--saving-on-demand", type=float, default=0.60)
    ap.add_argument("--saving-spot", type=float, default=0.25)
    a = ap.parse_args()
    scenarios = sorted(glob.glob(os.path.join(a.scenarios, "*.json")))
    if not scenarios:
        print("no scenario in %s" % a.scenarios)
        return 1
    if not shared_data_present(scenarios):
        print("skipped: the traces the scenarios replay are absent")
        return 77
    r = subprocess.run([a.cli, "replay", *scenarios, "--format", "json"], capture_output=True,
                       text=True)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        print("cloudtune replay failed with status %d" % r.returncode)
        return 1
    out = json.loads(r.stdout)
    s, runs = out["summary"], len(out["runs"])
    checks = [
        ("cost / oracle, median", s["cloudtune_cost_vs_oracle_median"], "<=", a.median),
        ("cost / oracle, p90", s["cloudtune_cost_vs_oracle_p90"], "<=", a.p90),
        ("deadlines and budgets missed where the oracle met them",
         s["cloudtune_missed_where_oracle_met"], "<=", 0),
        ("saving vs fixed on demand, median", s["cloudtune_saving_vs_fixed_median"], ">=",
         a.saving_on_demand),
        ("saving vs fixed spot with restarts, median", s["cloudtune_saving_vs_fixed_spot_median"],
         ">=", a.saving_spot),
        ("deadlines Uniform Progress met where cloudtune missed",
         s["uniform_progress_met_where_cloudtune_missed"], "<=", 0),
        ("cost / Uniform Progress's, median", s["cloudtune_cost_vs_uniform_progress_median"], "<",
         1.0),
    ]
    failed = 0
    print("%d scenarios, %d runs" % (len(scenarios), runs))
    for name, value, op, limit in checks:
        ok = value <= limit if op == "<=" else value >= limit if op == ">=" else value < limit
        failed += not ok
        print("%-4s %s: %.4f (target %s %g)" % ("ok" if ok else "FAIL", name, value, op, limit))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
