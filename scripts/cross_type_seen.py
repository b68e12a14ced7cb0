#!/usr/bin/env python3
"""How much of a new GPU type must a job see before `cloudtune fit` carries to the rest of it?

usage: cross_type_seen.py [--cli build/bin/cloudtune] [--seen k1,k2,gpu1,node1]
                          TYPE=DIR:SUFFIX TYPE=DIR:SUFFIX ...
  e.g. cross_type_seen.py t4=../shared/data/traces/pollux-t4: rtx=../shared/data/traces/sia:-rtx

The split of shared/eval/cross_type_accuracy.py (every configuration of type A with instance_type
A, plus part of type B; predict the rest of B), with more of B seen:
  kN     the N configurations of B with the fewest replicas, then smallest batch (the eval's k)
  gpu1   every single-GPU configuration of B (its compute at every batch size)
  node1  every single-machine configuration of B (compute and the all-reduce within a machine)
Rows are averaged per key (num_nodes, num_replicas, local_bsz) as the evals do. For each model,
ordered pair and seen set it prints the MAPE of step time on the rest of B, split into its
single-machine and multi-machine configurations, and the mean signed error of each part; the last
lines give, per seen set, the median and worst MAPE over pairs and the share of predictions within
1 and 2 predicted log_sigma, and whether a miss of those shares is the variance or the tails
(calibration.py). Standard library only.
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile

from calibration import shape_line
from trace_keys import mean_by_key


def load(folder, suffix):
    names = ["%s%s.csv" % (n, suffix) for n in ("placements", "scalability")]
    return mean_by_key([os.path.join(folder, n) for n in names
                        if os.path.exists(os.path.join(folder, n))])


def seen_keys(keys, what):
    order = sorted(keys, key=lambda k: (k[1], k[0], k[2]))
    if what.startswith("k"):
        return order[:int(what[1:])]
    if what == "gpu1":
        return [k for k in order if k[1] == 1]
    if what == "node1":
        return [k for k in order if k[0] == 1]
    raise ValueError("unknown seen set '%s' (expected kN, gpu1 or node1)" % what)


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time",
                    "instance_type"])
        for typ, k, v in rows:
            w.writerow([k[0], k[1], k[2], repr(v[0]), repr(v[1]), typ])


def score(cli, a, da, b, db, seen, tmp):
    test = [k for k in sorted(db) if k not in set(seen)]
    if not test:
        return None
    tr, te, model = (os.path.join(tmp, n) for n in ("train.csv", "test.csv", "model.json"))
    write(tr, [(a, k, da[k]) for k in sorted(da)] + [(b, k, db[k]) for k in seen])
    write(te, [(b, k, db[k]) for k in test])
    subprocess.run([cli, "fit", tr, "-o", model], capture_output=True, check=True)
    out = subprocess.run([cli, "predict", model, te], capture_output=True, text=True,
                         check=True).stdout
    err = {}
    z = []
    for r in csv.DictReader(out.splitlines()):
        k = (int(float(r["num_nodes"])), int(float(r["num_replicas"])), int(float(r["local_bsz"])))
        p = float(r["predicted_step_time"])
        err[k] = (p - db[k][0]) / db[k][0]
        if r.get("log_sigma") and float(r["log_sigma"]) > 0:
            z.append(abs(math.log(db[k][0] / p)) / float(r["log_sigma"]))
    parts = {"one machine": [e for k, e in err.items() if k[0] == 1],
             "several": [e for k, e in err.items() if k[0] > 1]}
    return 100 * statistics.fmean(abs(e) for e in err.values()), parts, z


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default="build/bin/cloudtune")
    ap.add_argument("--seen", default="k1,k2,gpu1,node1")
    ap.add_argument("types", nargs="+", help="TYPE=DIR:SUFFIX")
    a = ap.parse_args()
    seen_sets = a.seen.split(",")
    sets = {}
    for spec in a.types:
        name, rest = spec.split("=", 1)
        folder, suffix = rest.rsplit(":", 1) if ":" in rest else (rest, "")
        for m in sorted(os.listdir(folder)):
            data = load(os.path.join(folder, m), suffix)
            if len(data) >= 10:
                sets.setdefault(m, {})[name] = data
    summary = {s: ([], []) for s in seen_sets}
    with tempfile.TemporaryDirectory() as tmp:
        for m, by_type in sorted(sets.items()):
            for ta in sorted(by_type):
                for tb in sorted(by_type):
                    if ta == tb:
                        continue
                    for s in seen_sets:
                        r = score(a.cli, ta, by_type[ta], tb, by_type[tb],
                                  seen_keys(by_type[tb], s), tmp)
                        if r is None:
                            continue
                        mape, parts, z = r
                        summary[s][0].append(mape)
                        summary[s][1].extend(z)
                        cells = "  ".join(
                            "%s n=%d %+.0f%%" % (p, len(v), 100 * statistics.fmean(v))
                            for p, v in parts.items() if v)
                        print("%-12s %5s -> %-5s %-6s MAPE %7.2f%%  signed: %s" %
                              (m, ta, tb, s, mape, cells))
    for s, (v, z) in summary.items():
        if v:
            print("seen %-6s median %6.2f%% worst %7.2f%% over %d pairs; within 1 sigma %.0f%% "
                  "2 sigma %.0f%%" % (s, statistics.median(v), max(v), len(v),
                                      100 * sum(x <= 1 for x in z) / max(1, len(z)),
                                      100 * sum(x <= 2 for x in z) / max(1, len(z))))
            print("shape %-6s %s" % (s, shape_line(z)))


if __name__ == "__main__":
    try:
        main()
    except (subprocess.CalledProcessError, OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
