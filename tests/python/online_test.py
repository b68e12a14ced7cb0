"""The online tuner from Python: examples/train_fashion_mnist.py under torchrun (2 Gloo workers on
127.0.0.1) with CLOUDTUNE_TARGET_PROGRESS set writes `recommendation` records whose numbers are
what `cloudtune recommend` gives for the inputs each record names (profile, progress, current
configuration) and the efficiency model it decided with; the saved state is restored by a second
run.

    CLOUDTUNE_LIBRARY=build/lib/libcloudtune_plugin.so CLOUDTUNE_CLI=build/bin/cloudtune \
        /usr/bin/python3 tests/python/online_test.py
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from torchrun_test import REPO, EXAMPLE, free_port, sidecar  # noqa: E402

TARGET = 20000
CLI = os.environ.get("CLOUDTUNE_CLI") or str(REPO / "build/bin/cloudtune")


def run(tmp, steps):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDTUNE")}
    env["CLOUDTUNE_LIBRARY"] = os.environ.get("CLOUDTUNE_LIBRARY") or str(
        REPO / "build/lib/libcloudtune_plugin.so")
    env.update(OMP_NUM_THREADS="1", CLOUDTUNE="1", CLOUDTUNE_HISTORY="off", CLOUDTUNE_MEASURE_EVERY="10",
               CLOUDTUNE_REFIT_SECONDS="1", CLOUDTUNE_INSTANCE_TYPE="g4dn.12xlarge",
               CLOUDTUNE_TARGET_PROGRESS=str(TARGET), CLOUDTUNE_STATE="state.json")
    cmd = [sys.executable, str(REPO / "python/cloudtune/torchrun.py"), "--nproc_per_node", "2",
           "--monitor_interval", "1", "--master_addr", "127.0.0.1", "--master_port",
           str(free_port()), str(EXAMPLE), "--log-every", "100", "--test-limit", "500",
           "--batch", "32", "--steps", str(steps)]
    r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=150)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def cli_recommend(tmp, rec):
    i = rec["inputs"]
    csv = pathlib.Path(tmp) / "record_profile.csv"
    csv.write_text(i["profile_csv"])
    model = pathlib.Path(tmp) / "record_efficiency.json"  # the model the job decided with
    model.write_text(json.dumps(rec["models"]["efficiency"]))
    c = i["current"]
    cmd = [CLI, "recommend", "--profile", str(csv), "--gns", str(model),
           "--current", "%s:%d:%d:%d:%d" % (c["instance_type"], c["num_nodes"],
                                            c["gpus_per_node"], c["local_bsz"], c["accum_steps"]),
           "--target-progress", str(TARGET), "--progress", "%.17g" % i["progress"],
           "--format", "json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


class OnlineTest(unittest.TestCase):
    def check_same(self, tmp, rec):
        cli = cli_recommend(tmp, rec)
        self.assertEqual(rec["action"], cli["action"])
        self.assertEqual(rec["proposed"]["description"], cli["proposed"]["description"])
        for k in ("cost_usd", "hours", "throughput"):
            self.assertAlmostEqual(rec["proposed"][k], cli["proposed"][k],
                                   delta=1e-6 * abs(cli["proposed"][k]))

    def test_recommendations_match_cli_and_state_is_restored(self):
        with tempfile.TemporaryDirectory() as tmp:
            first = run(tmp, 200)
            recs = [r for r in sidecar(tmp) if r["kind"] == "recommendation"]
            self.assertGreaterEqual(len(recs), 1, first.stdout[-3000:] + first.stderr[-3000:])
            for rec in recs:
                self.check_same(tmp, rec)
            saved = json.loads((pathlib.Path(tmp) / "state.json").read_text())["state"]
            os.rename(pathlib.Path(tmp) / "cloudtune.sidecar.jsonl",
                      pathlib.Path(tmp) / "first.jsonl")
            r = run(tmp, 30)
            self.assertIn("cloudtune: restored state from state.json", r.stdout + r.stderr)
            recs = [r for r in sidecar(tmp) if r["kind"] == "recommendation"]
            self.assertGreaterEqual(len(recs), 1)
            self.assertEqual(recs[0]["trigger"], "restored")
            self.assertEqual(recs[0]["inputs"]["progress"], saved["progress"])
            self.check_same(tmp, recs[0])


if __name__ == "__main__":
    unittest.main()
