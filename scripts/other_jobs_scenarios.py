#!/usr/bin/env python3
"""Scenarios the policy was not developed on: other jobs over the three GPU types, other starts.

usage: other_jobs_scenarios.py OUT_DIR [--cli build/bin/cloudtune] [--scenarios data/scenarios]
                               [--traces ../shared/data/traces] [--gpu-figures]
then:  build/bin/cloudtune replay OUT_DIR/models/*.json --format json -o models.json
       build/bin/cloudtune replay OUT_DIR/starts/*.json --format json -o starts.json

The shipped multi-type scenarios are all imagenet started on T4 nodes. This writes two sets from
them (pollux-imagenet-multitype, -deadline, -deadline-spot16), with paths made absolute:
  models/  every other Pollux T4 job with validation traces and Sia traces on both other GPU types
           (bert, cifar10, ncf), on the same three types, started on 2 g4dn.12xlarge nodes at
           the traced local batch whose global batch is nearest the job's base batch:
             -cost, -cost-spot16            the cost goal, without and with the spot traces;
             -deadline, -deadline-spot16    the cost goal within a deadline: the geometric mean
                                            of the fastest-first baseline's and the oracle's
                                            makespans in the cost run (seed 1); on these jobs
                                            the cheapest plan, which grows its batch, is faster
                                            than the fastest hardware at the start's batch, so
                                            only a plan that grows the batch early meets it;
             -deadline-medium{,-spot16}     the fastest-first baseline's makespan there;
             -budget, -budget-spot16        the time goal within a budget: the geometric mean of
                                            the oracle's and the fastest-first baseline's costs.
           These jobs take minutes to two hours, so they decide every 120 s and measure for 60 s
           (the imagenet scenarios: 1,800 s and 300 s; a live job decides every 30 s).
  starts/  the three imagenet scenarios started on one rtx2080ti.8x node (local batch 28) and on
           one quadro6000.4x node (local batch 57).
The deadlines and budgets come from a replay of the cost scenarios with --cli (seed 1), so the
script needs a build. Only the standard library is used.

--gpu-figures: the same scenarios (the same deadlines and budgets), with the two Sia GPUs'
datasheet figures in "gpu_extra" (GPU_FIGURES), as a user of those nodes would give them. Without
it, as in the shipped scenarios, the catalog knows nothing of the two GPUs and the policy projects
their compute from the T4's with an unknown ratio.
"""
import argparse
import copy
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

from spot_trace_variants import absolute, write  # absolute paths; a scenario written by name
from trace_keys import rows_by_key

# Bytes a step all-reduces (4 x the parameters, FP32), of the models the traces' benchmark ran
# (adaptdl osdi21-artifact, benchmark/models/): cifar10 is ResNet-18 for CIFAR; bert is
# bert-base-uncased with a span head (run_squad.py); ncf is NeuMF-end on ml-1m (6,040 users,
# 3,706 items, 32 factors, 3 MLP layers; dense embeddings, all-reduced whole).
GRADIENT_BYTES = {"cifar10": 4 * 11173962, "bert": 4 * 109483778, "ncf": 4 * 1602657}

# Dense FP32 TFLOPS and memory bandwidth (GB/s) of one GPU, NVIDIA's launch figures (reference
# boost clock); neither GPU is in shared/data's gpu_specs.csv. For --gpu-figures only.
GPU_FIGURES = {"RTX2080Ti": (13.45, 616), "QuadroRTX6000": (16.3, 672)}

TEMPLATES = ["pollux-imagenet-multitype", "pollux-imagenet-multitype-deadline",
             "pollux-imagenet-multitype-deadline-spot16"]


def replay(cli, paths):
    """{scenario name: {policy: row}} of seed 1."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run([cli, "replay", *paths, "--seeds", "1", "--format", "json", "-o", out],
                       check=True)
        with open(out) as f:
            runs = json.load(f)["runs"]
    return {r["scenario"]: {p["policy"]: p for p in r["policies"]} for r in runs}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--cli", default=os.path.join(here, "..", "build", "bin", "cloudtune"))
    ap.add_argument("--scenarios", default=os.path.join(here, "..", "data", "scenarios"))
    ap.add_argument("--traces", default=os.path.join(here, "..", "..", "shared", "data", "traces"))
    ap.add_argument("--gpu-figures", action="store_true",
                    help="give the Sia GPUs' datasheet figures in gpu_extra (see above)")
    args = ap.parse_args()
    traces = os.path.abspath(args.traces)
    tpl = {}
    for name in TEMPLATES:
        path = os.path.join(args.scenarios, name + ".json")
        with open(path) as f:
            tpl[name] = absolute(json.load(f), os.path.dirname(os.path.abspath(path)))

    # starts/: imagenet from the other two types.
    for name, s in tpl.items():
        for itype, nodes, gpus, bsz in [("rtx2080ti.8x", 1, 8, 28), ("quadro6000.4x", 1, 4, 57)]:
            v = copy.deepcopy(s)
            v["start"] = {"instance_type": itype, "nodes": nodes, "gpus_per_node": gpus,
                          "local_bsz": bsz}
            write(v, os.path.join(args.out_dir, "starts"), name + "-from-" + itype.split(".")[0])

    # models/: the other jobs.
    models_dir = os.path.join(args.out_dir, "models")
    files = {"g4dn.12xlarge": ("pollux-t4", ""), "rtx2080ti.8x": ("sia", "-rtx"),
             "quadro6000.4x": ("sia", "-quad")}
    jobs = {}
    for d in sorted(glob.glob(os.path.join(traces, "pollux-t4", "*"))):
        model = os.path.basename(d)
        vals = glob.glob(os.path.join(d, "validation-*.csv"))
        if model == "imagenet" or not vals:
            continue
        csvs = {t: [os.path.join(traces, src, model, "placements%s.csv" % sfx),
                    os.path.join(traces, src, model, "scalability%s.csv" % sfx)]
                for t, (src, sfx) in files.items()}
        if not all(os.path.exists(p) for ps in csvs.values() for p in ps):
            continue
        batch = {int(os.path.basename(v)[len("validation-"):-4]): v for v in vals}
        b0 = min(batch)
        s = copy.deepcopy(tpl["pollux-imagenet-multitype"])
        for t in s["traces"]:
            t["csv"] = csvs[t["instance_type"]]
        s["noise"] = {"validation_csv": batch[b0], "base_batch": b0}
        s.pop("gradient_bytes", None)  # the template's is imagenet's (ResNet-50)
        if model in GRADIENT_BYTES:
            s["gradient_bytes"] = GRADIENT_BYTES[model]
        s["validation"] = {str(b): batch[b] for b in sorted(batch)}
        lbs = sorted({k[2] for k in rows_by_key(csvs["g4dn.12xlarge"]) if k[:2] == (2, 8)})
        if not lbs:
            continue
        s["start"] = {"instance_type": "g4dn.12xlarge", "nodes": 2, "gpus_per_node": 4,
                      "local_bsz": min(lbs, key=lambda b: abs(math.log(8 * b / b0)))}
        s["decision_interval_s"] = 120
        s["measure_s"] = 60
        s["description"] = ("%s measured over T4, RTX 2080 Ti and Quadro RTX 6000, as "
                            "pollux-imagenet-multitype; written by other_jobs_scenarios.py" % model)
        spot = copy.deepcopy(tpl["pollux-imagenet-multitype-deadline-spot16"]["spot"])
        jobs[model] = (s, spot)
        s["objective"] = {"goal": "cost"}
        write(s, models_dir, "other-%s-cost" % model)
        with_spot = dict(s, spot=spot)
        write(with_spot, models_dir, "other-%s-cost-spot16" % model)

    ref = replay(args.cli, [os.path.join(models_dir, "other-%s-cost.json" % m) for m in jobs])
    for model, (s, spot) in jobs.items():
        r = ref["other-%s-cost" % model]
        deadline = math.sqrt(r["oracle"]["makespan_h"] * r["fastest-first"]["makespan_h"])
        budget = math.sqrt(r["oracle"]["cost_usd"] * r["fastest-first"]["cost_usd"])
        d = dict(s, objective={"goal": "cost", "deadline_h": round(deadline, 3)})
        b = dict(s, objective={"goal": "time", "budget_usd": round(budget, 2)})
        write(d, models_dir, "other-%s-deadline" % model)
        write(dict(d, spot=spot), models_dir, "other-%s-deadline-spot16" % model)
        medium = r["fastest-first"]["makespan_h"]
        m = dict(s, objective={"goal": "cost", "deadline_h": round(medium, 3)})
        write(m, models_dir, "other-%s-deadline-medium" % model)
        write(dict(m, spot=spot), models_dir, "other-%s-deadline-medium-spot16" % model)
        write(b, models_dir, "other-%s-budget" % model)
        write(dict(b, spot=spot), models_dir, "other-%s-budget-spot16" % model)
        print("%s: start %s, deadlines %.3f h and %.3f h, budget $%.2f" % (
            model, s["start"], deadline, medium, budget), file=sys.stderr)
    if args.gpu_figures:  # after the reference replay: the constraints stay those without them
        for path in glob.glob(os.path.join(args.out_dir, "*", "*.json")):
            with open(path) as f:
                v = json.load(f)
            for g in v.get("gpu_extra", []):
                if g.get("gpu_model") in GPU_FIGURES:
                    g["fp32_tflops"], g["memory_bandwidth_gbs"] = GPU_FIGURES[g["gpu_model"]]
                    g["note"] = g["gpu_model"] + ": NVIDIA's launch figures (--gpu-figures)"
            write(v, os.path.dirname(path), v["name"])


if __name__ == "__main__":
    main()
