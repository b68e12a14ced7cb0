#!/usr/bin/env python3
"""Is the stated uncertainty of `cloudtune steps` the wrong variance or the wrong shape?

usage: steps_calibration.py [--cli build/bin/cloudtune] [--steps-args="--growth-sigma 0"]
                            MODEL_DIR [...]

The two splits of shared/eval/steps_accuracy.py on the same folders (validation-<B>.csv): the two
smallest batches observed, every larger one predicted; and sequential (the k smallest observed,
the next predicted, k >= 2). For each split, the shares of truths within 1 and 2 predicted
log_sigma, and what a Gaussian and a Laplace error of the measured variance would give
(calibration.py). Standard library only.
"""
import argparse
import csv
import glob
import json
import math
import os
import shlex
import subprocess
import sys

from calibration import shape_line


def runs(folder):
    out = {}
    for path in glob.glob(os.path.join(folder, "validation-*.csv")):
        b = int(os.path.basename(path)[len("validation-"):-len(".csv")])
        with open(path, newline="") as f:
            out[b] = (path, list(csv.DictReader(f)))
    return dict(sorted(out.items()))


def z_of(cli, rs, observed, target, extra):
    args = [cli, "steps", *extra]
    for b in observed:
        args += ["--observed", "%d=%s" % (b, rs[b][0])]
    last = rs[target][1][-1]
    out = json.loads(subprocess.run(args + ["--batch", str(target), "--progress", last["progress"]],
                                    capture_output=True, text=True, check=True).stdout)
    return abs(math.log(float(last["iteration"]) / float(out["iterations"]))) / out["log_sigma"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default="build/bin/cloudtune")
    ap.add_argument("--steps-args", default="", help="extra arguments for `cloudtune steps`")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    extra = shlex.split(a.steps_args)
    z = {"two smallest": [], "sequential": []}
    for folder in a.models:
        rs = runs(folder)
        if len(rs) < 3:
            sys.exit("steps_calibration.py: %s: %d validation-<B>.csv file(s), need 3 or more"
                     % (folder, len(rs)))
        b = list(rs)
        z["two smallest"] += [z_of(a.cli, rs, b[:2], t, extra) for t in b[2:]]
        z["sequential"] += [z_of(a.cli, rs, b[:k], b[k], extra) for k in range(2, len(b))]
    for name, v in z.items():
        print("%-13s n=%-3d %s" % (name, len(v), shape_line(v)))


if __name__ == "__main__":
    try:
        main()
    except (subprocess.CalledProcessError, OSError, KeyError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
