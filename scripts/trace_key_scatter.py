#!/usr/bin/env python3
"""Scatter of a trace's rows that share a configuration key (num_nodes, num_replicas, local_bsz).

usage: trace_key_scatter.py --pollux DIR          (every model folder: placements.csv + scalability.csv)
       trace_key_scatter.py LABEL=TRACE.csv[,TRACE.csv...] ...

fit_accuracy.py averages the rows of each key and scores predictions against those averages. In
the Pollux traces, the rows that share a key come from different placements (e.g. "13", "31" and
"22" are all (2 nodes, 4 replicas)), which the key does not tell apart. This script reports the
pooled standard deviation of log(step_time) of such rows around their key's mean (n-1 corrected),
and the error that a predictor returning each multi-row key's expected value would still make
against the averaged target of that key: mean over the multi-row keys of
sqrt(2/pi) * sigma / sqrt(rows). It says how noisy the targets of those keys are; it is not a
bound for the single-row keys. Only the standard library is used.
"""
import argparse
import math
import os
import statistics
import sys

from trace_keys import rows_by_key


def log_steps_by_key(paths):
    return {k: [math.log(st) for st, _ in v] for k, v in rows_by_key(paths).items()}


def floor(acc):
    ss, dof = 0.0, 0
    for v in acc.values():
        if len(v) >= 2:
            m = statistics.fmean(v)
            ss += sum((x - m) ** 2 for x in v)
            dof += len(v) - 1
    if dof == 0:
        return None
    sigma = math.sqrt(ss / dof)
    mape = statistics.fmean(
        math.sqrt(2 / math.pi) * sigma / math.sqrt(len(v)) for v in acc.values() if len(v) >= 2)
    return sigma, mape, sum(1 for v in acc.values() if len(v) >= 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pollux", help="folder of model folders holding placements.csv and scalability.csv")
    ap.add_argument("sets", nargs="*", help="LABEL=TRACE.csv[,TRACE.csv...]")
    a = ap.parse_args()
    sets = []
    if a.pollux:
        for m in sorted(os.listdir(a.pollux)):
            files = [os.path.join(a.pollux, m, n + ".csv") for n in ("placements", "scalability")]
            files = [f for f in files if os.path.exists(f)]
            if files:
                sets.append((m, files))
    for s in a.sets:
        label, _, files = s.partition("=")
        sets.append((label, files.split(",")))
    if not sets:
        ap.error("no trace sets given")
    print("%-14s %5s %11s %14s %16s" % ("set", "keys", "keys_2+rows", "sigma_log", "err_multirow"))
    for label, files in sets:
        acc = log_steps_by_key(files)
        f = floor(acc)
        if f is None:
            print("%-14s %5d  no key has two rows" % (label, len(acc)))
            continue
        print("%-14s %5d %11d %14.4f %15.2f%%" % (label, len(acc), f[2], f[0], 100 * f[1]))


if __name__ == "__main__":
    try:
        main()
    except (OSError, KeyError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
