#!/usr/bin/env python3
"""Prints a short summary of a cloudtune sidecar (JSON Lines): record counts per kind, the last
measurement and the last recommendation. Standard library only."""
import collections
import json
import sys


def main(path):
    kinds = collections.Counter()
    last = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                print("%s:%d: not JSON (%s)" % (path, n, e))
                continue
            kinds[r.get("kind", "?")] += 1
            last[r.get("kind", "?")] = r
    print("records: " + ", ".join("%s %d" % kv for kv in sorted(kinds.items())))
    m = last.get("measurement")
    if m:
        keys = ["step", "throughput", "step_time", "sync_time", "grad_sqr", "grad_var",
                "noise_scale", "biased", "skipped_steps"]
        print("last measurement: " + json.dumps({k: m[k] for k in keys if k in m}))
    r = last.get("recommendation")
    if r:
        print("last recommendation: " + json.dumps(r)[:2000])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summarize_sidecar.py SIDECAR.jsonl")
    main(sys.argv[1])
