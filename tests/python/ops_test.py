"""The plugin library from Python: it loads with torch.ops.load_library, its ops exist, and the
bucketed (DDP communication hook) protocol gives the same gradient-noise estimate as the whole-
gradient protocol of plugin/cloudtune.h.

    CLOUDTUNE_LIBRARY=build/lib/libcloudtune_plugin.so /usr/bin/python3 tests/python/ops_test.py
"""

import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

OPS = ["init", "enabled", "step_begin", "sync_begin", "sync_end", "grads_local", "grads_reduced",
       "step_end", "should_checkpoint", "shutdown", "bucket_local", "bucket_reduced",
       "buckets_done"]

# One process = one plugin: each protocol runs in its own interpreter. Two simulated replicas
# (rank 0's view): replica gradients g0, g1 with a common signal plus noise, split in 3 buckets.
SIMULATION = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import cloudtune
ops = cloudtune.load_library()
mode, steps = sys.argv[2], int(sys.argv[3])
assert ops.init(0, 2, 16, 1, 1), "plugin did not start"
gen = torch.Generator().manual_seed(7)
signal = torch.randn(1000, generator=gen)
for step in range(steps):
    g0 = signal + 3 * torch.randn(1000, generator=gen)
    g1 = signal + 3 * torch.randn(1000, generator=gen)
    avg = (g0 + g1) / 2
    ops.step_begin()
    if mode == "whole":
        slot = ops.grads_local([g0])
        other = float(g1.square().sum())  # what replica 1 would have put in its slot
        ops.sync_begin(); ops.sync_end()
        ops.grads_reduced([avg], (slot + other) / 2)
    else:
        ops.sync_begin()
        folded = 0
        for lo, hi in ((0, 100), (100, 550), (550, 1000)):  # 3 buckets
            slot = ops.bucket_local(g0[lo:hi])
            other = float(g1[lo:hi].square().sum())
            ops.bucket_reduced(avg[lo:hi].clone(), (slot + other) / 2)
        ops.sync_end()
        n = ops.buckets_done(1)
        assert n == 3, n
    ops.step_end(16, 1)
ops.shutdown()
"""


# One process, world size 1: DDP + SGD with cloudtune.attach (batch inferred from the forwards).
SINGLE = r"""
import os, sys, torch, torch.distributed as dist
sys.path.insert(0, sys.argv[1])
import cloudtune
dist.init_process_group("gloo", init_method="file://" + sys.argv[2] + "/store", rank=0,
                        world_size=1)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(20, 1))
class SGD(torch.optim.SGD):  # counts the steps that reach the optimizer through both wrappers
    count = 0
    def step(self, *args, **kwargs):
        SGD.count += 1
        return super().step(*args, **kwargs)
opt = SGD(model.parameters(), lr=0.01)
tuner = cloudtune.attach(model, opt, library=sys.argv[3])
sched = torch.optim.lr_scheduler.StepLR(opt, 10, 0.5)  # wraps the (wrapped) step again
w = torch.randn(20, 1)
for step in range(30):
    x = torch.randn(12, 20)
    loss = (model(x) - x @ w).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    sched.step()
print("active", tuner.active, "steps", tuner.steps, "counted", SGD.count)
cloudtune.shutdown()
dist.destroy_process_group()
"""


def library():
    return os.environ.get("CLOUDTUNE_LIBRARY") or str(REPO / "build/lib/libcloudtune_plugin.so")


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


class OpsTest(unittest.TestCase):
    def test_library_loads_and_ops_exist(self):
        import torch
        import cloudtune
        ops = cloudtune.load_library(library())
        for name in OPS:
            self.assertTrue(hasattr(ops, name), f"torch.ops.cloudtune.{name} missing")
        # Off (CLOUDTUNE unset in this process): every op is a cheap no-op.
        self.assertFalse(cloudtune.enabled())
        self.assertEqual(ops.bucket_local(torch.ones(4)), 0.0)
        ops.bucket_reduced(torch.ones(4), 1.0)
        self.assertEqual(ops.buckets_done(1), 0)
        self.assertFalse(cloudtune.should_checkpoint())

    def test_0_missing_library_is_named(self):
        import cloudtune
        if cloudtune._loaded is not None:
            self.skipTest("already loaded in this process")
        with self.assertRaisesRegex(FileNotFoundError, "/nonexistent/lib.so"):
            cloudtune.load_library("/nonexistent/lib.so")

    def test_torchrun_option_fix(self):
        from torch.distributed.elastic.multiprocessing.api import Std
        from cloudtune import torchrun
        torchrun.patch()
        self.assertEqual(Std.from_str("0"), Std.NONE)
        self.assertEqual(Std.from_str("3"), Std.ALL)
        self.assertEqual(Std.from_str("0:1,1:3"), {0: Std.OUT, 1: Std.ALL})
        with self.assertRaisesRegex(ValueError, "7"):  # the fix's message, or torch's own
            Std.from_str("7")

    def run_single(self, tmp, lib):
        env = dict(os.environ, CLOUDTUNE="1", CLOUDTUNE_SIDECAR=f"{tmp}/single.jsonl",
                   CLOUDTUNE_PROFILE=f"{tmp}/single.csv", CLOUDTUNE_MEASURE_EVERY="10")
        env.pop("CLOUDTUNE_STATE", None)
        r = subprocess.run([sys.executable, "-c", SINGLE, str(REPO / "python"), tmp, lib],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_attach_single_worker(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = self.run_single(tmp, library())
            self.assertIn("active True steps 30 counted 30", r.stdout)
            self.assertNotIn("lr_scheduler.step()` before", r.stderr)
            recs = records(f"{tmp}/single.jsonl")
            meas = [x for x in recs if x["kind"] == "measurement"]
            self.assertEqual(len(meas), 3, recs)
            self.assertEqual(meas[0]["config"]["local_bsz"], 12)  # inferred from the forwards
            self.assertEqual(meas[0]["config"]["num_replicas"], 1)
            end = recs[-1]
            self.assertEqual(end["kind"], "end")
            # One replica: consecutive steps paired, flagged biased.
            self.assertTrue(end["biased"])
            self.assertTrue(end["noise_scale"] is not None and end["noise_scale"] > 0, end)

    def test_attach_without_library_trains_untuned(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = self.run_single(tmp, f"{tmp}/missing/libcloudtune_plugin.so")
            self.assertIn("active False steps 0 counted 30", r.stdout)
            self.assertIn("missing/libcloudtune_plugin.so' not found", r.stderr)
            self.assertIn("tuner off", r.stderr)
            self.assertFalse(os.path.exists(f"{tmp}/single.jsonl"))

    def run_protocol(self, mode, tmp, steps=40):
        env = dict(os.environ, CLOUDTUNE="1", CLOUDTUNE_LIBRARY=library(),
                   CLOUDTUNE_SIDECAR=f"{tmp}/{mode}.jsonl",
                   CLOUDTUNE_PROFILE=f"{tmp}/{mode}.csv", CLOUDTUNE_MEASURE_EVERY="10")
        env.pop("CLOUDTUNE_STATE", None)
        r = subprocess.run([sys.executable, "-c", SIMULATION, str(REPO / "python"), mode,
                            str(steps)], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        recs = records(f"{tmp}/{mode}.jsonl")
        end = [r for r in recs if r["kind"] == "end"]
        self.assertEqual(len(end), 1, recs)
        return end[0]

    def test_buckets_sum_to_one_sample_per_step(self):
        with tempfile.TemporaryDirectory() as tmp:
            whole = self.run_protocol("whole", tmp)
            buckets = self.run_protocol("buckets", tmp)
        for rec in (whole, buckets):
            self.assertEqual(rec["steps"], 40)
            self.assertTrue(math.isfinite(rec["noise_scale"]) and rec["noise_scale"] > 0, rec)
        # Three buckets per step are one noise sample per step (count = 2 replicas), exactly
        # what the whole-gradient protocol gives.
        for key in ("grad_sqr", "grad_var", "noise_scale"):
            self.assertAlmostEqual(buckets[key] / whole[key], 1.0, places=5, msg=key)
        # Sanity of the estimate: |G|^2 = 1000 (signal), tr(Sigma) per sample = 9*1000*16 at
        # micro-batch 16 -> noise scale ~ 9*16 = 144 samples; EMA of 40 noisy steps: loose bounds.
        self.assertGreater(buckets["noise_scale"], 144 / 3)
        self.assertLess(buckets["noise_scale"], 144 * 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
