#!/usr/bin/env python3
"""Is the throughput model's stated uncertainty honest on real traces?

usage: fit_uncertainty_coverage.py [--cli build/bin/cloudtune] --pollux DIR [--suffix=-rtx]
                                  [--fit-args="--growth-sigma 0"]

For every model folder under DIR (placements{SUFFIX}.csv + scalability{SUFFIX}.csv), rows averaged
per key (num_nodes, num_replicas, local_bsz) as in shared/eval/fit_accuracy.py, three splits:
  S1  a random 75/25 split of the keys (random.Random(0) shuffle of the sorted keys)
  S2  fit on keys with replicas <= Rmax//2, predict the keys with more replicas
  S3  fit on 8 random keys (random.Random(100 + seed), seeds 0-4), predict the rest (pooled)
`cloudtune fit` on the first part, `cloudtune predict` on the rest, and the fraction of held-out
keys whose |log(predicted / measured step time)| is within 1 and 2 of the predicted log_sigma
(a calibrated Gaussian gives 68 % and 95 %), plus the median log_sigma; the "all" line pools every
set per split, and a "shape" line per split tells a wrong variance from heavy tails (calibration.py).
Standard library only.
"""
import argparse
import csv
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile

from calibration import shape_line
from trace_keys import mean_by_key


def load(folder, suffix=""):
    names = ["%s%s.csv" % (n, suffix) for n in ("placements", "scalability")]
    return mean_by_key([os.path.join(folder, n) for n in names
                        if os.path.exists(os.path.join(folder, n))])


def coverage(cli, data, train, test, tmp, fit_args=()):
    paths = [os.path.join(tmp, n) for n in ("train.csv", "test.csv", "model.json")]
    for path, keys in zip(paths, (train, test)):
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])
            for k in keys:
                w.writerow([k[0], k[1], k[2], repr(data[k][0]), repr(data[k][1])])
    subprocess.run([cli, "fit", paths[0], "-o", paths[2], *fit_args], capture_output=True,
                   check=True)
    out = subprocess.run([cli, "predict", paths[2], paths[1]], capture_output=True, text=True,
                         check=True).stdout
    z, sig = [], []
    for r in csv.DictReader(out.splitlines()):
        k = (int(float(r["num_nodes"])), int(float(r["num_replicas"])), int(float(r["local_bsz"])))
        s = float(r["log_sigma"])
        z.append(abs(math.log(float(r["predicted_step_time"]) / data[k][0])) / s)
        sig.append(s)
    return z, sig


def summary(z, sig):
    return (100 * sum(x <= 1 for x in z) / len(z), 100 * sum(x <= 2 for x in z) / len(z),
            statistics.median(sig))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="build/bin/cloudtune")
    ap.add_argument("--pollux", required=True)
    ap.add_argument("--suffix", default="")
    ap.add_argument("--fit-args", default="", help="extra arguments for `cloudtune fit`")
    a = ap.parse_args()
    print("%-17s %-28s %-28s %-28s" % ("set", *("%s: <=1sd <=2sd median_sigma" % s
                                                  for s in ("S1", "S2", "S3"))))
    pooled = [([], []) for _ in range(3)]
    with tempfile.TemporaryDirectory() as tmp:
        for m in sorted(os.listdir(a.pollux)):
            data = load(os.path.join(a.pollux, m), a.suffix)
            if not data:
                continue
            keys = sorted(data)
            ks = keys[:]
            random.Random(0).shuffle(ks)
            cut = int(0.75 * len(ks))
            rmax = max(k[1] for k in keys)
            splits = [[(ks[:cut], ks[cut:])],
                      [([k for k in keys if k[1] <= rmax // 2], [k for k in keys if k[1] > rmax // 2])],
                      []]
            for seed in range(5):
                ks3 = keys[:]
                random.Random(100 + seed).shuffle(ks3)
                splits[2].append((ks3[:8], ks3[8:]))
            row = []
            for i, split in enumerate(splits):
                z, sig = [], []
                for train, test in split:
                    if train and test:
                        zz, ss = coverage(a.cli, data, train, test, tmp, shlex.split(a.fit_args))
                        z += zz
                        sig += ss
                pooled[i][0].extend(z)
                pooled[i][1].extend(sig)
                row.append("%5.0f%% %5.0f%% %8.3f      " % summary(z, sig) if z else "%-28s" % "-")
            print("%-17s %s" % (m + a.suffix, "".join(row)))
    print("%-17s %s" % ("all", "".join("%5.0f%% %5.0f%% %8.3f      " % summary(*p) if p[0] else ""
                                     for p in pooled)))
    for name, p in zip(("S1", "S2", "S3"), pooled):
        print("shape %s: %s" % (name, shape_line(p[0])))


if __name__ == "__main__":
    try:
        main()
    except (subprocess.CalledProcessError, OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
