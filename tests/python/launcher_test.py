"""examples/launcher.py's reading of recommendations: the sidecar reader skips a truncated last
line, and proposal() maps a real `cloudtune recommend` document (search/recommend.h ToJson) to the
worker count and local batch it applies, with the caps of this machine.

    CLOUDTUNE_CLI=build/bin/cloudtune /usr/bin/python3 tests/python/launcher_test.py
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import launcher  # noqa: E402


class LauncherTest(unittest.TestCase):
    def test_reader_skips_partial_lines_and_honours_offset(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "s.jsonl"
            first = json.dumps({"kind": "start", "step": 0}) + "\n"
            path.write_text(first + json.dumps({"kind": "measurement", "step": 10}) + "\n"
                            + '{"kind": "recommendation", "proposed": {"con')  # killed mid-write
            recs = launcher.read_records(path)
            self.assertEqual([r["kind"] for r in recs], ["start", "measurement"])
            self.assertEqual([r["step"] for r in launcher.read_records(path, len(first))], [10])
            self.assertEqual(launcher.read_records(pathlib.Path(tmp) / "missing.jsonl"), [])

    def test_proposal_fields(self):
        rec = {"kind": "recommendation", "action": "switch",
               "proposed": {"description": "2x g4dn.12xlarge",
                            "config": {"nodes": 2, "gpus_per_node": 4, "local_bsz": 24,
                                       "accum_steps": 1}}}
        self.assertEqual(launcher.proposal(rec), ("switch", 8, 48, "2x g4dn.12xlarge"))
        self.assertIsNone(launcher.proposal({"kind": "measurement"}))
        self.assertIsNone(launcher.proposal({"kind": "recommendation", "proposed": {}}))
        nested = {"kind": "recommendation", "recommendation": rec}
        self.assertEqual(launcher.proposal(nested)[1:3], (8, 48))

    def test_proposal_of_a_real_recommendation(self):
        cli = os.environ.get("CLOUDTUNE_CLI") or str(REPO / "build/bin/cloudtune")
        if not os.path.exists(cli):
            self.skipTest(f"no cloudtune CLI at {cli}")
        with tempfile.TemporaryDirectory() as tmp:
            profile = pathlib.Path(tmp) / "profile.csv"
            profile.write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time,accum_steps,"
                               "instance_type\n1,2,64,0.094,0.011,0,g4dn.12xlarge\n")
            r = subprocess.run([cli, "recommend", "--profile", str(profile), "--gns",
                                "4.5,0.88,128", "--target-progress", "900", "--progress", "60",
                                "--current", "g4dn.12xlarge:1:2:64", "--max-nodes", "1",
                                "--format", "json"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        cfg = doc["proposed"]["config"]
        p = launcher.proposal({"kind": "recommendation", **doc})
        self.assertIsNotNone(p, doc)
        self.assertEqual(p[0], doc["action"])
        self.assertEqual(p[1], cfg["nodes"] * cfg["gpus_per_node"])
        self.assertEqual(p[2], cfg["local_bsz"] * (cfg["accum_steps"] + 1))


if __name__ == "__main__":
    unittest.main(verbosity=2)
