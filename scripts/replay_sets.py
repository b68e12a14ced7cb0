#!/usr/bin/env python3
"""Every replay set the policy is judged on, built, replayed and summarised by one command.

usage: replay_sets.py OUT_DIR [--cli build/bin/cloudtune] [--scenarios data/scenarios]
                      [--held-out] [--sets shipped,deadline,...] [--reuse]

Writes the scenarios of each set under OUT_DIR, replays each set (`cloudtune replay ... --format
json`, saved as OUT_DIR/<set>.json) and prints the replay table of docs/results.md ("Where things
stand") in Markdown. The sets:
  shipped     data/scenarios/*.json, each over its own seeds;
  deadline    the shipped scenarios with a deadline, seeds 1-20;
  zones, preemption, multizone
              spot_trace_variants.py: the shipped spot scenarios on the collection's other traces;
  other       other_jobs_scenarios.py: other jobs over the three GPU types and other starts (the
              script replays the cost scenarios once to set their deadlines and budgets);
  other-gpu-figures
              the same with the two Sia GPUs' datasheet figures given (--gpu-figures), as a user
              of those nodes would give them; the same deadlines and budgets.
--held-out replays the seeds the policy was not developed on instead: shipped and deadline 21-40,
the others 6-10. --reuse keeps a set's JSON when it is already in OUT_DIR (to print the table
again). Only the standard library is used.

Columns: cloudtune's cost / the hindsight oracle's, median and p90, over the runs with the cost
goal; runs where cloudtune missed a deadline or budget that the oracle met; cloudtune's median
saving against fixed on demand and against fixed spot with restarts (over the runs fixed spot
finished); the oracle's own median saving against fixed spot over the same runs (what the set
leaves to win); cloudtune's cost / Uniform Progress's on the deadline runs with the same outcome;
under the time goal within a budget, cloudtune's makespan / the oracle's (median); the replay's
wall time. Figures in bold miss a target (cost /
oracle: median <= 1.10, p90 <= 1.25; no miss where the oracle met; saving >= 60 % against on
demand and >= 25 % against fixed spot).
"""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SETS = ["shipped", "deadline", "zones", "preemption", "multizone", "other", "other-gpu-figures"]


def scenario_files(a, name):
    """The scenario files of one set and the seeds to replay them with (None: their own)."""
    held = a.held_out
    if name in ("shipped", "deadline"):
        files = sorted(glob.glob(os.path.join(a.scenarios, "*.json")))
        if name == "deadline":
            files = [f for f in files if deadline_of(f) > 0]
            return files, list(range(21, 41) if held else range(1, 21))
        return files, list(range(21, 41)) if held else None
    if name in ("zones", "preemption", "multizone"):
        out = os.path.join(a.out_dir, "spot")
        if not os.path.isdir(os.path.join(out, name)):
            run([sys.executable, os.path.join(HERE, "spot_trace_variants.py"), out,
                 "--scenarios", a.scenarios])
        files = sorted(glob.glob(os.path.join(out, name, "*.json")))
    else:
        out = os.path.join(a.out_dir, name)
        if not os.path.isdir(os.path.join(out, "models")):
            run([sys.executable, os.path.join(HERE, "other_jobs_scenarios.py"), out, "--cli", a.cli,
                 "--scenarios", a.scenarios] + (["--gpu-figures"] if name != "other" else []))
        files = sorted(glob.glob(os.path.join(out, "models", "*.json")) +
                       glob.glob(os.path.join(out, "starts", "*.json")))
    return files, list(range(6, 11)) if held else None


def deadline_of(path):
    with open(path) as f:
        return json.load(f).get("objective", {}).get("deadline_h", 0) or 0


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("%s failed (status %d):\n%s" % (" ".join(cmd[:3]), r.returncode, r.stderr))
    return r


def oracle_saving_vs_fixed_spot(report):
    """Median of 1 - the oracle's cost / fixed spot's, over the runs fixed spot finished (the runs
    the summary's saving vs fixed spot counts)."""
    v = []
    for r in report["runs"]:
        p = {x["policy"]: x for x in r["policies"]}
        o, fs = p.get("oracle"), p.get("fixed-spot")
        if o and fs and fs["finished"] and fs["cost_usd"] > 0:
            v.append(1 - o["cost_usd"] / fs["cost_usd"] if o["finished"] else -math.inf)
    return statistics.median(v) if v else math.nan


def fmt(v, scale=1.0, digits=3):
    """A figure, or "—" where the replay has none (null, NaN, infinite)."""
    ok = isinstance(v, (int, float)) and math.isfinite(v)
    return "%.*f" % (digits, scale * v) if ok else "—"


def cell(v, missed, scale=1.0, digits=3):
    """The figure in bold when `missed(v)` (a number that misses its target)."""
    text = fmt(v, scale, digits)
    return "**%s**" % text if isinstance(v, (int, float)) and missed(v) else text


def row(name, report, seconds, seeds):
    s = report["summary"]
    label = "%s (%d%s)" % (name, len(report["runs"]),
                           "" if seeds is None else "; seeds %d–%d" % (seeds[0], seeds[-1]))
    return "| %s | %s / %s | %s | %s / %s %% | %s %% | %s | %s | %s |" % (
        label,
        cell(s.get("cloudtune_cost_vs_oracle_median"), lambda v: v > 1.10),
        cell(s.get("cloudtune_cost_vs_oracle_p90"), lambda v: v > 1.25),
        cell(s.get("cloudtune_missed_where_oracle_met", 0), lambda v: v > 0, digits=0),
        cell(s.get("cloudtune_saving_vs_fixed_median"), lambda v: v < 0.60, 100, 1),
        cell(s.get("cloudtune_saving_vs_fixed_spot_median"), lambda v: v < 0.25, 100, 1),
        fmt(oracle_saving_vs_fixed_spot(report), 100, 1),
        fmt(s.get("cloudtune_cost_vs_uniform_progress_median")),
        fmt(s.get("cloudtune_makespan_vs_oracle_time_goal_median")),
        fmt(seconds, digits=0) + " s" if math.isfinite(seconds) else "—")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--cli", default=os.path.join(HERE, "..", "build", "bin", "cloudtune"))
    ap.add_argument("--scenarios", default=os.path.join(HERE, "..", "data", "scenarios"))
    ap.add_argument("--held-out", action="store_true",
                    help="the seeds the policy was not developed on")
    ap.add_argument("--sets", default=",".join(SETS),
                    help="comma-separated, of: " + ", ".join(SETS))
    ap.add_argument("--reuse", action="store_true", help="keep a set's JSON already in OUT_DIR")
    a = ap.parse_args()
    a.scenarios, a.out_dir = os.path.abspath(a.scenarios), os.path.abspath(a.out_dir)
    names = [n for n in a.sets.split(",") if n]
    unknown = [n for n in names if n not in SETS]
    if unknown:
        sys.exit("--sets: unknown set %s (known: %s)" % (", ".join(unknown), ", ".join(SETS)))
    os.makedirs(a.out_dir, exist_ok=True)
    print("| set (runs) | cost ÷ oracle, median / p90 | missed where the oracle met "
          "| saving vs fixed on demand / fixed spot | the oracle's saving vs fixed spot "
          "| ÷ Uniform Progress (deadlines) | makespan ÷ oracle (time goal) | replay time |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        files, seeds = scenario_files(a, name)
        if not files:
            sys.exit("set %s: no scenario" % name)
        out = os.path.join(a.out_dir, "%s%s.json" % (name, "-held-out" if a.held_out else ""))
        seconds = math.nan
        if not (a.reuse and os.path.exists(out)):
            cmd = [a.cli, "replay", *files, "--format", "json", "-o", out]
            if seeds:
                cmd += ["--seeds", *map(str, seeds)]
            t0 = time.monotonic()
            run(cmd)
            seconds = time.monotonic() - t0
        with open(out) as f:
            print(row(name, json.load(f), seconds, seeds), flush=True)


if __name__ == "__main__":
    main()
