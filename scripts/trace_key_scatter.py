#!/usr/bin/env python3
"""Scatter of a trace's rows that share a configuration key (num_nodes, num_replicas, local_bsz).

usage: trace_key_scatter.py --pollux DIR [--suffix=-quad]  (every model folder:
                                   placements{SUFFIX}.csv + scalability{SUFFIX}.csv)
       trace_key_scatter.py LABEL=TRACE.csv[,TRACE.csv...] ...

fit_accuracy.py averages the rows of each key and scores predictions against those averages. In
the Pollux traces, the rows that share a key come from different placements (e.g. "13", "31" and
"22" are all (2 nodes, 4 replicas)), which the key does not tell apart. This script reports the
pooled standard deviation of log(step_time) of such rows around their key's mean (n-1 corrected),
and the error that a predictor returning each multi-row key's expected value would still make
against the averaged target of that key: mean over the multi-row keys of
sqrt(2/pi) * sigma / sqrt(rows). It says how noisy the targets of those keys are; it is not a
bound for the single-row keys.

A second figure covers the single-row keys (the Sia traces have only those): the scatter of the
keys' mean log(step_time) along the batch. At each (num_nodes, num_replicas) with three or more
batch sizes, each inner point's deviation from the straight line in log batch through its two
neighbours, d = y_i - ((1 - w) y_{i-1} + w y_{i+1}), has variance (1 + (1 - w)^2 + w^2) sigma^2
for independent noise sigma on a locally straight curve. A shape along the batch that every
placement shares (a step in the compute time at some batch, which the model's per-batch effects
take up) is removed by subtracting, at each batch triple, the mean d over the placements that
have it (P of them, rescaled by sqrt(P / (P - 1))). sigma is then read robustly (1.4826 x the
median |d|), and sqrt(2/pi) sigma is the S1 error (MAPE) of a predictor that knew every key's
expected value. A curvature particular to a placement also enters d, so this is an upper
estimate, the closer the finer the batch grid (the Sia and Pollux grids step by about sqrt(2),
Gavel's by 2). Only the standard library is used.
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


def along_batch(acc):
    """(sigma, error of a perfect predictor, inner points) from the keys' means along the batch."""
    by = {}
    for (n, r, b), v in acc.items():
        by.setdefault((n, r), []).append((b, statistics.fmean(v)))
    by_triple = {}
    for pts in by.values():
        pts.sort()
        for (b0, y0), (b1, y1), (b2, y2) in zip(pts, pts[1:], pts[2:]):
            w = math.log(b1 / b0) / math.log(b2 / b0)
            d = y1 - ((1 - w) * y0 + w * y2)
            by_triple.setdefault((b0, b1, b2), []).append(d / math.sqrt(1 + (1 - w) ** 2 + w ** 2))
    ds = []
    for v in by_triple.values():
        if len(v) >= 2:
            m, k = statistics.fmean(v), math.sqrt(len(v) / (len(v) - 1))
            ds.extend(k * (d - m) for d in v)
    if len(ds) < 5:
        return None
    sigma = 1.4826 * statistics.median(abs(d) for d in ds)
    return sigma, math.sqrt(2 / math.pi) * sigma, len(ds)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pollux", help="folder of model folders holding placements.csv and scalability.csv")
    ap.add_argument("--suffix", default="", help="file name suffix, e.g. -rtx for placements-rtx.csv")
    ap.add_argument("sets", nargs="*", help="LABEL=TRACE.csv[,TRACE.csv...]")
    a = ap.parse_args()
    sets = []
    if a.pollux:
        for m in sorted(os.listdir(a.pollux)):
            files = [os.path.join(a.pollux, m, n + a.suffix + ".csv")
                     for n in ("placements", "scalability")]
            files = [f for f in files if os.path.exists(f)]
            if files:
                sets.append((m + a.suffix, files))
    for s in a.sets:
        label, _, files = s.partition("=")
        sets.append((label, files.split(",")))
    if not sets:
        ap.error("no trace sets given")
    print("%-17s %5s %11s %10s %13s %7s %10s %13s" % (
        "set", "keys", "keys_2+rows", "sigma_log", "err_multirow",
        "inner", "sigma_b", "err_perfect"))
    for label, files in sets:
        acc = log_steps_by_key(files)
        f, g = floor(acc), along_batch(acc)
        cols = ("%11d %10.4f %12.2f%%" % (f[2], f[0], 100 * f[1]) if f
                else "%11d %10s %13s" % (0, "-", "-"))
        cols += (" %7d %10.4f %12.2f%%" % (g[2], g[0], 100 * g[1]) if g
                 else " %7s %10s %13s" % ("-", "-", "-"))
        print("%-17s %5d %s" % (label, len(acc), cols))


if __name__ == "__main__":
    try:
        main()
    except (OSError, KeyError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
