#!/usr/bin/env python3
"""Convert Gavel's measured throughputs into cloudtune trace CSVs (DESIGN §5).

Source: github stanford-futuredata/gavel, commit c4fa40097339e9608ab71fd64c8bdea96a5e4a4c,
scheduler/simulation_throughputs.json (copied to ../shared/data/traces/gavel/). It holds steps
per second of several model families and batch sizes on K80, P100 and V100 with 1, 2, 4 and 8
GPUs; keys "<gpu>_unconsolidated" are jobs spread over servers. Only the jobs running alone
(entry "null") are used; co-located pairs are skipped.

What each output row means (one file per GPU type and model family, all batch sizes):
  num_nodes     1 for the consolidated measurements (all GPUs in one server); for the
                "_unconsolidated" ones, one GPU per server (num_nodes = num_replicas). Gavel does
                not say how many servers an unconsolidated job spans; one per GPU is our assumption.
  num_replicas  Gavel's scale factor (number of GPUs).
  local_bsz     the batch size in Gavel's job name (Gavel runs it on every worker).
  step_time     scale factor / (steps per second). Gavel's rate of a multi-GPU job counts the
                steps of all its workers: on one V100 server ResNet-18 (batch 16) does 32 steps/s
                on 1 GPU and 383 on 8, i.e. 48 per GPU, close to the 1-GPU rate (as expected of
                data-parallel training inside one NVLink server), whereas reading 383 as optimizer
                steps/s would make 8 GPUs 12x faster than 1. Spread over servers the per-GPU rate
                falls (64/8 = 8 steps/s), as the network all-reduce predicts.
  sync_time     0: Gavel does not measure the all-reduce. cloudtune's fit reads sync_time = 0 on a
                configuration with more than one replica as "not measured" (it then fits that
                configuration's step time only, not its compute time).
  instance_type the Gavel GPU type (k80, p100, v100).
Rows of the 1-GPU job appear in both the consolidated and unconsolidated tables with the same
values; they are written once.

usage: scripts/gavel_to_trace.py [--json PATH] [--out DIR] [--layout flat|eval]

--layout flat (the default) writes OUT/<gpu>_<family>.csv, as shipped in data/traces/gavel/;
--layout eval writes OUT/<family>/placements-<gpu>.csv, the layout of ../shared/eval's scripts, so
that cross_type_accuracy.py k80=OUT:-k80 p100=OUT:-p100 v100=OUT:-v100 runs S4 on Gavel's GPUs.
"""
import argparse
import ast
import csv
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=os.path.join(HERE, "..", "..", "shared", "data", "traces", "gavel",
                                                   "simulation_throughputs.json"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "data", "traces", "gavel"))
    ap.add_argument("--layout", choices=("flat", "eval"), default="flat",
                    help="flat: OUT/<gpu>_<family>.csv; eval: OUT/<family>/placements-<gpu>.csv")
    a = ap.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    rows = {}  # (gpu, family) -> {(nodes, replicas, bsz): step_time}
    for table, jobs in data.items():
        gpu, _, spread = table.partition("_")
        for key, entry in jobs.items():
            name, scale = ast.literal_eval(key)
            m = re.fullmatch(r"(.+) \(batch size (\d+)\)", name)
            if not m or "null" not in entry or not entry["null"]:
                continue  # no batch size (A3C, CycleGAN) or no solo measurement
            family, bsz = m.group(1), int(m.group(2))
            steps_per_s = float(entry["null"])
            if steps_per_s <= 0:
                continue
            nodes = scale if spread == "unconsolidated" else 1
            rows.setdefault((gpu, family), {})[(nodes, scale, bsz)] = scale / steps_per_s
    os.makedirs(a.out, exist_ok=True)
    for (gpu, family), configs in sorted(rows.items()):
        if len({k[1] for k in configs}) < 2:
            continue  # single-GPU only: nothing to model about parallel efficiency
        slug = re.sub(r"[^a-z0-9]+", "", family.lower())
        if a.layout == "eval":
            os.makedirs(os.path.join(a.out, slug), exist_ok=True)
            path = os.path.join(a.out, slug, "placements-%s.csv" % gpu)
        else:
            path = os.path.join(a.out, "%s_%s.csv" % (gpu, slug))
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time", "instance_type"])
            for (n, r, b), st in sorted(configs.items()):
                w.writerow([n, r, b, repr(st), 0, gpu])
        print(path, len(configs), "configurations")


if __name__ == "__main__":
    main()
