#!/usr/bin/env python3
"""CTest gate: run shared/eval/fit_accuracy.py and fail when the worst S1/S2/S3 exceed limits.

usage: fit_accuracy_gate.py --cli CLOUDTUNE --eval fit_accuracy.py --pollux DIR
                            --s1 PCT --s2 PCT --s3 PCT [--limit LABEL=S1,S2,S3 ...]
--s1/--s2/--s3 bound the worst figure over all sets; each --limit bounds one set's figures (a
set named in a --limit that the output lacks is an error).
Exit 0 when every figure is within its limit, 1 when one is not (or the script failed),
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
    ap.add_argument("--limit", action="append", default=[], metavar="LABEL=S1,S2,S3",
                    help="per-set limits in percent")
    a = ap.parse_args()
    if not os.path.exists(a.eval) or not os.path.isdir(a.pollux):
        print("skipped: the shared data is absent (%s or %s not found)" % (a.eval, a.pollux))
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
    sets = {mm.group(1): [float(mm.group(i)) for i in (2, 3, 4)] for mm in re.finditer(
        r"^(\S+)\s+keys\s+\d+\s+S1\s+([\d.]+)%\s+S2\s+([\d.]+)%\s+S3\s+([\d.]+)%", r.stdout, re.M)}
    for spec in a.limit:
        label, _, values = spec.partition("=")
        try:
            lim = [float(x) for x in values.split(",")]
        except ValueError:
            lim = []
        if len(lim) != 3:
            print("bad --limit %r: expected LABEL=S1,S2,S3" % spec)
            return 1
        if label not in sets:
            print("no result for set %r in the output" % label)
            return 1
        bad += ["%s S%d %.2f%% > %.2f%%" % (label, i + 1, v, l)
                for i, (v, l) in enumerate(zip(sets[label], lim)) if v > l]
    if bad:
        print("accuracy regression: " + ", ".join(bad))
        return 1
    print("ok: worst S1 %.2f%% S2 %.2f%% S3 %.2f%% within %s" % (worst[0], worst[1], worst[2], limits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
