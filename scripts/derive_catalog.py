#!/usr/bin/env python3
"""Derives cloudtune's embedded default catalog (data/catalog/*.csv) from the shared catalog.

Source: ../shared/data/catalog/{gpu_instances,gpu_specs,spot_interruptions}.csv (see the
SOURCES.md there for every upstream commit and snapshot date). Transformation:
  instances.csv  -- the required columns of gpu_instances.csv, plus `interruption_band`: the AWS
                    Spot Advisor band of the same instance type in us-east-1 (empty for GCP/Azure,
                    which publish none). No value is invented; empty cells stay empty.
  gpu_specs.csv  -- gpu_model, fp32/fp16 TFLOPS, memory and bandwidth columns of gpu_specs.csv,
                    plus a K80 row with no figures (the model is known, for Gavel's K80 traces,
                    but no spec was sourced).
Usage: python3 scripts/derive_catalog.py [SHARED_CATALOG_DIR] [OUT_DIR]
"""
import csv
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "shared", "data", "catalog")
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "data", "catalog")

bands = {}
for r in csv.DictReader(open(os.path.join(src, "spot_interruptions.csv"))):
    if r["region"] == "us-east-1" and r["os"] == "Linux":
        bands[r["instance_type"]] = r["interruption_band"]

cols = ["cloud", "region", "instance_type", "gpu_model", "gpus", "gpu_memory_gib", "vcpus",
        "memory_gib", "network_gbps", "ondemand_usd_per_hour", "spot_usd_per_hour"]
with open(os.path.join(out, "instances.csv"), "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(cols + ["interruption_band"])
    for r in csv.DictReader(open(os.path.join(src, "gpu_instances.csv"))):
        band = bands.get(r["instance_type"], "") if r["cloud"] == "aws" else ""
        w.writerow([r[c] for c in cols] + [band])

scols = ["gpu_model", "fp32_tflops", "fp16_tflops", "fp16_nontensor_tflops", "memory_gib",
         "memory_bandwidth_gbs"]
with open(os.path.join(out, "gpu_specs.csv"), "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(scols)
    for r in csv.DictReader(open(os.path.join(src, "gpu_specs.csv"))):
        w.writerow([r[c] for c in scols])
    w.writerow(["K80", "", "", "", "", ""])
