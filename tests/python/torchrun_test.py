"""End to end from Python: examples/train_fashion_mnist.py under torchrun with 2 Gloo workers on
127.0.0.1. With CLOUDTUNE=1 the sidecar has start / measurement / end records (every line parses)
and a finite positive noise scale; with CLOUDTUNE unset there is no sidecar. A restart from the
checkpoint continues the step count.

    CLOUDTUNE_LIBRARY=build/lib/libcloudtune_plugin.so \
        /usr/bin/python3 tests/python/torchrun_test.py
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
EXAMPLE = REPO / "examples" / "train_fashion_mnist.py"
CPP_EXAMPLE = os.environ.get("CLOUDTUNE_EXAMPLE") or str(REPO / "build/bin/train_fashion_mnist")
sys.path.insert(0, str(REPO / "examples"))
from launcher import free_port  # noqa: E402,F401 (fault_test and online_test take it from here)


def on_cloud_vm():
    """Whether the firmware says this is a cloud VM (then "auto" would ask the link-local metadata
    service, which tests must not reach: they turn it off)."""
    for f in ("sys_vendor", "product_name", "bios_vendor"):
        try:
            text = pathlib.Path("/sys/class/dmi/id", f).read_text().lower()
        except OSError:
            continue
        if "amazon" in text or "google" in text:
            return True
    return False


def torchrun(tmp, tuner, *args, timeout=120, extra_env=None, program=None, agent_args=()):
    """torchrun with 2 workers of the Python example, or of `program` (an executable: --no_python)
    under the default static rendezvous, whose agent serves the job's store. `agent_args` go to
    torchrun (they override the ones given here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDTUNE")}
    env["CLOUDTUNE_LIBRARY"] = str(pathlib.Path(os.environ.get("CLOUDTUNE_LIBRARY") or
                                                REPO / "build/lib/libcloudtune_plugin.so").resolve())
    env["OMP_NUM_THREADS"] = "1"
    # The job history's default place, per test: no warm start from another test's job.
    env["XDG_CACHE_HOME"] = str(tmp)
    if tuner:
        env.update(CLOUDTUNE="1", CLOUDTUNE_MEASURE_EVERY="10", CLOUDTUNE_WARMUP_STEPS="2")
    if extra_env:
        env.update(extra_env)
    if on_cloud_vm():
        env["CLOUDTUNE_METADATA_URL"] = "off"
    # torchrun through python/cloudtune/torchrun.py: the same agent, with the fix for torch 1.13's
    # --redirects/--tee parsing on Python >= 3.11 (see there).
    cmd = [sys.executable, str(REPO / "python/cloudtune/torchrun.py"), "--nproc_per_node", "2",
           "--monitor_interval", "1",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *agent_args,
           *(["--no_python", str(program)] if program else [str(EXAMPLE)]),
           "--log-every", "20", "--test-limit", "2000", *args]
    r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def sidecar(tmp):
    path = pathlib.Path(tmp) / "cloudtune.sidecar.jsonl"
    lines = path.read_text().splitlines()
    recs = []
    for i, line in enumerate(lines, 1):
        try:
            recs.append(json.loads(line))
        except ValueError as e:
            raise AssertionError(f"{path}:{i}: not JSON ({e}): {line[:200]}")
    return recs


class TorchrunTest(unittest.TestCase):
    def test_tuner_on_writes_sidecar(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = torchrun(tmp, True, "--steps", "60", "--batch", "32")
            self.assertIn("test accuracy", r.stdout)
            recs = sidecar(tmp)
            kinds = [rec["kind"] for rec in recs]
            self.assertEqual(kinds[0], "start", kinds)
            self.assertEqual(kinds[-1], "end", kinds)
            self.assertGreaterEqual(kinds.count("measurement"), 5, kinds)
            for rec in recs:
                self.assertEqual(rec["schema"], "cloudtune.sidecar/1")
            start = recs[0]
            self.assertEqual(start["world_size"], 2)
            meas = [rec for rec in recs if rec["kind"] == "measurement"]
            for m in meas:
                self.assertEqual(m["config"]["num_replicas"], 2)
                self.assertEqual(m["config"]["local_bsz"], 32)
                self.assertGreater(m["step_time"]["mean"], 0)
                self.assertGreaterEqual(m["sync_time"]["mean"], 0)
                self.assertLess(m["sync_time"]["mean"], m["step_time"]["mean"])
            end = recs[-1]
            self.assertEqual(end["steps"], 60)
            self.assertTrue(end["noise_scale"] is not None and math.isfinite(end["noise_scale"])
                            and end["noise_scale"] > 0, end)
            self.assertFalse(end["biased"])  # two replicas: the unbiased estimator
            self.assertGreaterEqual(end["skipped_steps"], 0)
            self.assertGreater(meas[-1]["gns_steps"], 40)  # one noise sample per step
            profile = (pathlib.Path(tmp) / "cloudtune.profile.csv").read_text().splitlines()
            self.assertGreaterEqual(len(profile), 2, profile)

    def test_cpp_example_joins_the_agents_store(self):
        """The C++ example under torchrun (static rendezvous: the agent serves the store at
        MASTER_PORT and says so in TORCHELASTIC_USE_AGENT_STORE): rank 0 joins it as a client,
        trains, and the tuner writes its sidecar."""
        with tempfile.TemporaryDirectory() as tmp:
            r = torchrun(tmp, True, "--steps", "60", "--batch", "32", program=CPP_EXAMPLE)
            self.assertIn("train_fashion_mnist: 2 worker(s)", r.stdout + r.stderr)
            self.assertIn("test accuracy", r.stdout + r.stderr)
            recs = sidecar(tmp)
            self.assertEqual(recs[0]["kind"], "start")
            self.assertEqual(recs[0]["world_size"], 2)
            self.assertEqual(recs[-1]["kind"], "end")
            self.assertEqual(recs[-1]["steps"], 60)

    def restarted(self, tmp, fail_step, monitor_interval, starts, *args, **kw):
        """40 steps under torchrun with one restart; on the first attempt rank 1 exits at
        `fail_step`. Asserts the restart counts of the sidecar's start records (`starts`) and the
        end at step 40; returns the output."""
        r = torchrun(tmp, True, "--steps", "40", "--batch", "32", "--fail-rank", "1",
                     "--fail-step", str(fail_step), *args,
                     agent_args=("--max_restarts", "1", "--monitor_interval",
                                 str(monitor_interval)), timeout=180, **kw)
        out = r.stdout + r.stderr
        recs = sidecar(tmp)
        self.assertEqual([rec["restart_count"] for rec in recs if rec["kind"] == "start"],
                         starts, out)
        self.assertEqual(recs[-1]["kind"], "end", out)
        self.assertEqual(recs[-1]["steps"], 40, out)
        return out

    def test_cpp_example_restarted_agrees_afresh(self):
        """The agent's store outlives a restart. On the first attempt rank 1 fails before it starts
        the tuner, so rank 0 turns the tuner off for that attempt: CLOUDTUNE_AGREE_TIMEOUT_SECONDS
        (1 s) passes long before the agent first looks at its workers (after 20 s) and restarts
        both. The second attempt agrees afresh: the tuner is on, and the sidecar has its start
        record (restart_count 1) and its end."""
        with tempfile.TemporaryDirectory() as tmp:
            out = self.restarted(tmp, 0, 20, [1], program=CPP_EXAMPLE,
                                 extra_env={"CLOUDTUNE_AGREE_TIMEOUT_SECONDS": "1"})
            self.assertIn("rank(s) did not start the plugin", out)  # the first attempt: off

    def test_python_example_restarted_mid_run(self):
        """The Python example under torchrun's agent store, restarted after rank 1 fails at step
        10 of the first attempt: both attempts agree to switch the tuner on (each under its own
        prefix of the agent's store), and the second runs to its end."""
        with tempfile.TemporaryDirectory() as tmp:
            out = self.restarted(tmp, 10, 2, [0, 1], "--sigterm", "exit")
            self.assertEqual(out.count("samples, tuner on"), 2, out)  # each attempt's start line

    def test_python_example_peer_gone_before_attach(self):
        """Rank 1 exits before cloudtune.attach: rank 0's attach does not raise (one line, tuner
        off); the job's own next all-reduce is what fails, and torchrun restarts both ranks. The
        agent first looks after 20 s, so it cannot stop rank 0 before its attach has answered."""
        with tempfile.TemporaryDirectory() as tmp:
            out = self.restarted(tmp, 0, 20, [1], "--sigterm", "exit")
            self.assertIn("the ranks could not agree to start the tuner", out)
            self.assertNotIn("in attach", out)  # no traceback through cloudtune.attach

    def test_cloudtune_alone_recommends(self):
        """Only CLOUDTUNE=1: the start line says what is known, and a recommendation comes (the
        machines are not in the catalog here: batch and worker advice, costs in GPU-hours)."""
        with tempfile.TemporaryDirectory() as tmp:
            torchrun(tmp, False, "--steps", "160", "--batch", "32", extra_env={"CLOUDTUNE": "1"})
            recs = sidecar(tmp)
            self.assertEqual(recs[0]["kind"], "start")
            self.assertEqual(recs[0]["instance"]["instance_type"], "local")
            recos = [r for r in recs if r["kind"] == "recommendation"]
            self.assertGreaterEqual(len(recos), 1, [r["kind"] for r in recs])
            self.assertEqual(recos[0]["target"], "none")
            self.assertIn(recos[0]["action"], ("keep", "switch", "measure"))
            self.assertTrue(recos[0]["reason"])

    def test_one_rank_off_turns_every_rank_off(self):
        """Rank 0 cannot write its sidecar: every rank stays off (one line each), so no rank adds
        the noise-scale element to its all-reduce alone; training matches a run with the tuner
        off."""
        def last_loss(text):
            losses = [float(l.split("loss")[1].split()[0]) for l in text.splitlines()
                      if " loss " in l]
            self.assertTrue(losses, text)
            return losses[-1]

        with tempfile.TemporaryDirectory() as tmp:
            off = torchrun(tmp, False, "--steps", "60", "--batch", "32", "--seed", "3")
            bad = torchrun(tmp, False, "--steps", "60", "--batch", "32", "--seed", "3",
                           extra_env={"CLOUDTUNE": "1",
                                      "CLOUDTUNE_SIDECAR": "/nonexistent/dir/x.jsonl"})
            out = bad.stdout + bad.stderr
            self.assertEqual(out.count("on every rank"), 2, out)
            self.assertAlmostEqual(last_loss(bad.stdout), last_loss(off.stdout),
                                   delta=0.01 * abs(last_loss(off.stdout)))

    def test_tuner_off_writes_nothing_and_resumes(self):
        with tempfile.TemporaryDirectory() as tmp:
            ck = str(pathlib.Path(tmp) / "ck.pt")
            torchrun(tmp, False, "--steps", "20", "--checkpoint", ck)
            r = torchrun(tmp, False, "--steps", "10", "--checkpoint", ck, "--batch", "48")
            self.assertEqual(list(pathlib.Path(tmp).glob("cloudtune.*")), [])
            self.assertIn("resumed from", r.stdout)
            self.assertIn("(30 in all)", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
