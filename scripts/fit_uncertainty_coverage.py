#!/usr/bin/env python3
"""Is the throughput model's stated uncertainty honest on real traces?

usage: fit_uncertainty_coverage.py [--cli build/bin/cloudtune] --pollux DIR

For every model folder under DIR (placements.csv + scalability.csv), rows averaged per key
(num_nodes, num_replicas, local_bsz) as in shared/eval/fit_accuracy.py, two splits:
  S1  a random 75/25 split of the keys (random.Random(0) shuffle of the sorted keys)
  S2  fit on keys with replicas <= Rmax//2, predict the keys with more replicas
`cloudtune fit` on the first part, `cloudtune predict` on the rest, and the fraction of held-out
keys whose |log(predicted / measured step time)| is within 1 and 2 of the predicted log_sigma
(a calibrated Gaussian gives 68 % and 95 %), plus the median log_sigma. Standard library only.
"""
import argparse
import csv
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile

from trace_keys import mean_by_key


def load(folder):
    return mean_by_key([os.path.join(folder, n) for n in ("placements.csv", "scalability.csv")
                        if os.path.exists(os.path.join(folder, n))])


def coverage(cli, data, train, test, tmp):
    paths = [os.path.join(tmp, n) for n in ("train.csv", "test.csv", "model.json")]
    for path, keys in zip(paths, (train, test)):
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])
            for k in keys:
                w.writerow([k[0], k[1], k[2], repr(data[k][0]), repr(data[k][1])])
    subprocess.run([cli, "fit", paths[0], "-o", paths[2]], capture_output=True, check=True)
    out = subprocess.run([cli, "predict", paths[2], paths[1]], capture_output=True, text=True,
                         check=True).stdout
    z, sig = [], []
    for r in csv.DictReader(out.splitlines()):
        k = (int(float(r["num_nodes"])), int(float(r["num_replicas"])), int(float(r["local_bsz"])))
        s = float(r["log_sigma"])
        z.append(abs(math.log(float(r["predicted_step_time"]) / data[k][0])) / s)
        sig.append(s)
    return (100 * sum(x <= 1 for x in z) / len(z), 100 * sum(x <= 2 for x in z) / len(z),
            statistics.median(sig))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="build/bin/cloudtune")
    ap.add_argument("--pollux", required=True)
    a = ap.parse_args()
    print("%-12s %-34s %-34s" % ("set", "S1: <=1sd <=2sd median_sigma", "S2: <=1sd <=2sd median_sigma"))
    with tempfile.TemporaryDirectory() as tmp:
        for m in sorted(os.listdir(a.pollux)):
            data = load(os.path.join(a.pollux, m))
            if not data:
                continue
            keys = sorted(data)
            ks = keys[:]
            random.Random(0).shuffle(ks)
            cut = int(0.75 * len(ks))
            rmax = max(k[1] for k in keys)
            s1 = coverage(a.cli, data, ks[:cut], ks[cut:], tmp)
            s2 = coverage(a.cli, data, [k for k in keys if k[1] <= rmax // 2],
                          [k for k in keys if k[1] > rmax // 2], tmp)
            print("%-12s %5.0f%% %5.0f%% %8.3f               %5.0f%% %5.0f%% %8.3f" % (m, *s1, *s2))


if __name__ == "__main__":
    try:
        main()
    except (subprocess.CalledProcessError, OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
