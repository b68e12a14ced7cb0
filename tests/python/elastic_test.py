"""examples/launcher.py --elastic end to end: a torch elastic job of the Fashion-MNIST example
(single-worker torchrun agents, --nnodes=1:3, c10d rendezvous on 127.0.0.1) follows
recommendations from 2 to 3 workers and back to 2 at another batch, then a spot revocation notice
(a fake AWS metadata endpoint) morphs it to 1 worker. Each transition checkpoints, rescales batch
and learning rate, and resumes from the checkpoint with the tuner's saved state; every stage is in
the sidecar.

    CLOUDTUNE_LIBRARY=build/lib/libcloudtune_plugin.so /usr/bin/python3 tests/python/elastic_test.py
"""

import http.server
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]


class Metadata(http.server.BaseHTTPRequestHandler):
    """AWS IMDSv2: a token, then the spot instance-action (404 until a notice is armed)."""
    notice = False

    def do_PUT(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"token")

    def do_GET(self):
        if Metadata.notice:
            body = json.dumps({"action": "terminate", "time": "2026-11-24T00:00:00Z"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args):
        pass


def records(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return out


def recommendation(workers, batch):
    return {"kind": "recommendation", "action": "switch",
            "proposed": {"description": f"{workers} x local, batch {batch}",
                         "config": {"nodes": workers, "gpus_per_node": 1, "local_bsz": batch,
                                    "accum_steps": 0, "instance_type": "local"}}}


class ElasticTest(unittest.TestCase):
    def test_scale_up_down_and_morph_on_revocation(self):
        lib = os.environ.get("CLOUDTUNE_LIBRARY")
        if not lib or not os.path.exists(lib):
            self.skipTest("CLOUDTUNE_LIBRARY is not set to the built plugin")
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with tempfile.TemporaryDirectory() as tmp:
            work = pathlib.Path(tmp)
            sidecar, recs = work / "cloudtune.sidecar.jsonl", work / "recs.jsonl"
            recs.touch()
            env = dict(os.environ, CLOUDTUNE="1", CLOUDTUNE_HISTORY="off", OMP_NUM_THREADS="1",
                       CLOUDTUNE_MEASURE_EVERY="10", CLOUDTUNE_PREEMPTION_POLL_SECONDS="1",
                       CLOUDTUNE_PREEMPTION_URL=f"http://127.0.0.1:{server.server_port}"
                       "/latest/meta-data/spot/instance-action")
            log = open(work / "launcher.log", "w")
            launcher = subprocess.Popen(
                [sys.executable, str(REPO / "examples/launcher.py"), "--elastic", "3",
                 "--nproc", "2", "--batch", "32", "--workdir", str(work), "--poll", "0.5",
                 "--min-segment-seconds", "0", "--max-restarts", "6",
                 "--recommendations", str(recs), "--", "--epochs", "3", "--check-every", "5",
                 "--log-every", "200", "--test-limit", "1000"],
                env=env, stdout=log, stderr=subprocess.STDOUT)

            def wait(what, pred, timeout=240):
                end = time.time() + timeout
                while time.time() < end:
                    found = [r for r in records(sidecar) if pred(r)]
                    if found:
                        return found
                    if launcher.poll() is not None:
                        break
                    time.sleep(0.5)
                log.flush()
                self.fail(f"no {what}; launcher log:\n" + (work / "launcher.log").read_text()[-4000:])

            def resumed(n):
                return lambda r: (r.get("kind") == "transition" and r.get("stage") == "resumed"
                                  and r["to"]["workers"] == n)

            def append(rec):
                with open(recs, "a") as f:
                    f.write(json.dumps(rec) + "\n")

            try:
                wait("measurement with 2 workers", lambda r: r.get("kind") == "measurement")
                append(recommendation(3, 32))
                wait("scale-up to 3", resumed(3))
                append(recommendation(2, 48))
                wait("scale-down to 2 at batch 48", resumed(2))
                Metadata.notice = True
                wait("morph to 1 worker", resumed(1))
                Metadata.notice = False
                rc = launcher.wait(timeout=600)
            finally:
                if launcher.poll() is None:
                    launcher.kill()
                log.close()
                server.shutdown()
            text = (work / "launcher.log").read_text()
            self.assertEqual(rc, 0, text[-4000:])
            rs = records(sidecar)
            stages = [(r["stage"], r["to"]["workers"], r["to"]["batch"], r["reason"])
                      for r in rs if r.get("kind") == "transition"]
            self.assertEqual(stages, [
                ("plan", 3, 32, "recommendation"), ("checkpoint", 3, 32, "recommendation"),
                ("scale", 3, 32, "recommendation"), ("resumed", 3, 32, "recommendation"),
                ("plan", 2, 48, "recommendation"), ("checkpoint", 2, 48, "recommendation"),
                ("scale", 2, 48, "recommendation"), ("resumed", 2, 48, "recommendation"),
                ("plan", 1, 48, "revocation"), ("checkpoint", 1, 48, "revocation"),
                ("scale", 1, 48, "revocation"), ("resumed", 1, 48, "revocation")], text[-3000:])
            # Each transition checkpointed, and the job resumed where that checkpoint was.
            trans = [r for r in rs if r.get("kind") == "transition"]
            for i in range(0, len(trans), 4):
                plan, ckpt, _, back = trans[i:i + 4]
                self.assertTrue(ckpt["saved"], ckpt)
                self.assertGreaterEqual(ckpt["step"], 1)
                self.assertGreaterEqual(back["step"], ckpt["step"])
            self.assertTrue(any(r.get("kind") == "preemption" for r in rs))
            # The restarted workers resumed from the checkpoint with the tuner's saved state.
            starts = [r for r in rs if r.get("kind") == "start"]
            worlds = [r["world_size"] for r in starts]
            for n in (3, 2, 1):
                self.assertIn(n, worlds)
            first_plan = next(i for i, r in enumerate(rs) if r.get("kind") == "transition")
            later = [r for r in rs[first_plan:] if r.get("kind") == "start"]
            self.assertGreaterEqual(len(later), 3)
            self.assertTrue(all(r.get("restored_state") for r in later), later)
            self.assertIn("resumed from", text)
            # Batch and learning rate rescaled as proposed (linear scaling from 2 x 32 at 0.05).
            self.assertIn("3 worker(s), local batch 32, lr 0.075", text)
            self.assertIn("2 worker(s), local batch 48, lr 0.075", text)
            self.assertIn("1 worker(s), local batch 48, lr 0.0375", text)
            import torch
            ck = torch.load(work / "checkpoint.pt", map_location="cpu")
            self.assertTrue(ck["finished"])
            self.assertEqual((ck["world"], ck["batch"]), (1, 48))
            self.assertAlmostEqual(ck["lr"], 0.0375)


if __name__ == "__main__":
    unittest.main(verbosity=2)
