#!/usr/bin/env python3
"""Variants of the shipped spot scenarios on spot traces they do not use.

usage: spot_trace_variants.py OUT_DIR [--scenarios data/scenarios] [--traces ../shared/data/spot-traces]
then:  build/bin/cloudtune replay OUT_DIR/zones/*.json --format json -o zones.json
       build/bin/cloudtune replay OUT_DIR/preemption/*.json --format json -o preemption.json
       build/bin/cloudtune replay OUT_DIR/multizone/*.json --format json -o multizone.json

The shipped scenarios that replay real spot capacity (a "spot" object) were written against a few
of the availability traces. A policy judged only on those may have learned their luck. This writes
three sets of the same scenarios with every other trace of the collection in their place:
  zones/       each shipped scenario on each availability trace of the same kind (1-node or
               16-node) that it does not use (a scenario with several traced types rotates them
               through the set), and each of those again 48 h further into the trace;
  preemption/  each shipped scenario on each 1-node preemption trace (a multi-node scenario then
               gets at most one spot node of a type) and each multi-node one on each 4-node
               preemption trace, rotated the same way;
  multizone/   each shipped scenario with one traced type on every zone of a collection at once
               (the type's market, "traces": {"TYPE": {"ZONE": "PATH", ...}}): a 16-node one on
               the 16-node availability traces and on the 4-node preemption traces, a 1-node one
               on the 1-node preemption traces and on both zones of its own availability trace's
               GPU and size, one collection (folder) at a time; each again 48 h further into the
               traces. Beside zones/ and
               preemption/, which hold the same scenarios on each zone alone, they measure what
               failing over between zones is worth.
A shipped scenario whose type is already sold in several zones is left out (it is the multizone
variant of a one-zone scenario). The scenarios keep their reading ("count" or "zero-is-up"), jobs, objectives and seeds; paths are
written absolute, so the variants replay from anywhere. Only the standard library is used.
"""
import argparse
import glob
import json
import os
import sys


def absolute(value, base):
    """The scenario with every relative path (a string starting with '../') made absolute."""
    if isinstance(value, dict):
        return {k: absolute(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [absolute(v, base) for v in value]
    if isinstance(value, str) and value.startswith("../"):
        return os.path.normpath(os.path.join(base, value))
    return value


def write(scenario, out_dir, name):
    scenario = json.loads(json.dumps(scenario))
    scenario["name"] = name
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(scenario, f, indent=1)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--scenarios", default=os.path.join(here, "..", "data", "scenarios"))
    ap.add_argument("--traces", default=os.path.join(here, "..", "..", "shared", "data",
                                                     "spot-traces"))
    args = ap.parse_args()
    args.traces = os.path.abspath(args.traces)
    avail = os.path.join(args.traces, "availability")
    pools = {
        "1-node": sorted(glob.glob(os.path.join(avail, "1-node", "*", "*.json"))),
        "16-node": sorted(glob.glob(os.path.join(avail, "16-node", "*", "*.json"))),
    }
    preempt = {
        "1-node": sorted(glob.glob(os.path.join(args.traces, "preemption", "1-node", "*", "*.json"))),
        "multi": sorted(glob.glob(os.path.join(args.traces, "preemption", "4-node", "*", "*.json"))),
    }
    if not pools["1-node"] or not pools["16-node"] or not preempt["1-node"] or not preempt["multi"]:
        sys.exit(f"{args.traces}: expected availability/1-node, availability/16-node, "
                 "preemption/1-node and preemption/4-node traces")
    def zone(path):  # <zone>_<gpu>_<n>.json
        return os.path.basename(path).split("_")[0]

    written = 0
    for path in sorted(glob.glob(os.path.join(args.scenarios, "*.json"))):
        base = os.path.dirname(os.path.abspath(path))
        with open(path) as f:
            scenario = absolute(json.load(f), base)
        spot = scenario.get("spot")
        if not spot or not spot.get("traces"):
            continue
        if any(isinstance(t, dict) for t in spot["traces"].values()):
            continue  # already a type sold in several zones: the variants of its one-zone twin
        types = list(spot["traces"])
        used = {os.path.realpath(p) for p in spot["traces"].values()}
        one_node = all("/1-node/" in p for p in spot["traces"].values())
        pool = pools["1-node" if one_node else "16-node"]
        for i, trace in enumerate(pool):
            if os.path.realpath(trace) in used:
                continue
            v = json.loads(json.dumps(scenario))
            for j, t in enumerate(types):
                v["spot"]["traces"][t] = pool[(i + j) % len(pool)]
            name = f"{scenario['name']}-zone{i}"
            write(v, os.path.join(args.out_dir, "zones"), name)
            v["spot"]["offset_h"] = v["spot"].get("offset_h", 0) + 48
            write(v, os.path.join(args.out_dir, "zones"), name + "-later")
            written += 2
        if len(types) == 1:
            own = os.path.basename(next(iter(spot["traces"].values())))
            same_gpu = [p for p in pools["1-node"]
                        if os.path.basename(p).split("_", 1)[1] == own.split("_", 1)[1]]
            kinds = ({"preempt1": preempt["1-node"], "avail1": same_gpu} if one_node else
                     {"avail16": pools["16-node"], "preempt4": preempt["multi"]})
            markets = {}  # one market per collection (a folder of traces taken together)
            for kind, files in kinds.items():
                for f in files:
                    folder = os.path.basename(os.path.dirname(f))
                    markets.setdefault(f"{kind}-{folder}", []).append(f)
            for label, files in sorted(markets.items()):
                if len({zone(f) for f in files}) < 2 or len({zone(f) for f in files}) < len(files):
                    continue  # one zone, or a zone twice (several GPUs or sizes)
                v = json.loads(json.dumps(scenario))
                v["spot"]["traces"] = {types[0]: {zone(f): f for f in files}}
                name = f"{scenario['name']}-zones-{label}"
                write(v, os.path.join(args.out_dir, "multizone"), name)
                v["spot"]["offset_h"] = v["spot"].get("offset_h", 0) + 48
                write(v, os.path.join(args.out_dir, "multizone"), name + "-later")
                written += 2
        for kind in ["1-node"] if one_node else ["1-node", "multi"]:
            pool = preempt[kind]
            for i in range(len(pool)):
                v = json.loads(json.dumps(scenario))
                for j, t in enumerate(types):
                    v["spot"]["traces"][t] = pool[(i + j) % len(pool)]
                suffix = "" if kind == "1-node" else "-4node"
                write(v, os.path.join(args.out_dir, "preemption"),
                      f"{scenario['name']}-preemption{i}{suffix}")
                written += 1
    print(f"{written} scenarios under {args.out_dir}/zones, {args.out_dir}/preemption and "
          f"{args.out_dir}/multizone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
