#!/usr/bin/env python3
"""CTest gate: run shared/eval/steps_accuracy.py against a cloudtune binary and fail when the
median or maximum error exceeds the thresholds (defaults: the targets of DESIGN §7).

usage: steps_accuracy_gate.py --cli BIN --eval steps_accuracy.py [--median 5] [--max 15] DIR...
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
    ap.add_argument("--median", type=float, default=5.0, help="largest median error allowed, %%")
    ap.add_argument("--max", type=float, default=15.0, help="largest maximum error allowed, %%")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    missing = [p for p in [a.eval] + a.dirs if not os.path.exists(p)]
    if missing:
        print("skipped: the shared data is absent (%s not found)" % ", ".join(missing))
        return 77
    r = subprocess.run([sys.executable, a.eval, "--cli", a.cli] + a.dirs,
                       capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        print("FAIL: steps_accuracy.py exited with %d" % r.returncode)
        return 1
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    m = re.match(r"steps error: median ([0-9.]+)% max ([0-9.]+)% over (\d+) predictions", last)
    if not m:
        print("FAIL: cannot parse the summary line: %r" % last)
        return 1
    median, worst = float(m.group(1)), float(m.group(2))
    ok = median <= a.median and worst <= a.max
    print("%s: median %.1f%% (limit %.1f%%), max %.1f%% (limit %.1f%%)"
          % ("PASS" if ok else "FAIL", median, a.median, worst, a.max))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
