#!/usr/bin/env python3
"""CTest gate: run shared/eval/fit_accuracy.py and fail when the worst S1/S2/S3 exceed limits.

usage: fit_accuracy_gate.py --cli CLOUDTUNE --eval fit_accuracy.py --pollux DIR
                            --s1 PCT --s2 PCT --s3 PCT
Exit 0 when every worst figure is within its limit, 1 when one is not (or the script failed),
77 (CTest "skipped") when the evaluation script or the traces are not there.
"""
import argparse
import os
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--pollux", required=True)
    ap.add_argument("--s1", type=float, required=True)
    ap.add_argument("--s2", type=float, required=True)
    ap.add_argument("--s3", type=float, required=True)
    a = ap.parse_args()
    if not os.path.exists(a.eval) or not os.path.isdir(a.pollux):
        print("skipped: %s or %s not found" % (a.eval, a.pollux))
        return 77
    r = subprocess.run([sys.executable, a.eval, "--cli", a.cli, "--pollux", a.pollux],
                       capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        print("fit_accuracy.py failed with status %d" % r.returncode)
        return 1
    m = re.search(r"^worst: S1 ([\d.]+)% S2 ([\d.]+)% S3 ([\d.]+)%", r.stdout, re.M)
    if not m:
        print("no 'worst:' line in the output")
        return 1
    worst = [float(x) for x in m.groups()]
    limits = [a.s1, a.s2, a.s3]
    bad = ["S%d %.2f%% > %.2f%%" % (i + 1, w, l) for i, (w, l) in enumerate(zip(worst, limits)) if w > l]
    if bad:
        print("accuracy regression: " + ", ".join(bad))
        return 1
    print("ok: worst S1 %.2f%% S2 %.2f%% S3 %.2f%% within %s" % (worst[0], worst[1], worst[2], limits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
