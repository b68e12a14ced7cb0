"""Fault injection, Python path: examples/train_fashion_mnist.py as 2 real worker processes
(RANK/WORLD_SIZE/MASTER_* set as torchrun sets them, Gloo over 127.0.0.1, cloudtune.attach with the
plugin library) where one rank -- rank 0, then rank 1 -- meets a fault: an unwritable sidecar,
profile or state file, a corrupt state file, an HTTP port already in use, a metadata endpoint that
hangs or answers garbage, a full disk (RLIMIT_FSIZE), NaN gradients for some steps. In every case
training finishes, its loss matches a run with the plugin off (same seed), and the faulty rank's
log says what happened in one line. Each case prints a row of the fault matrix.

    CLOUDTUNE_LIBRARY=build/lib/libcloudtune_plugin.so /usr/bin/python3 tests/python/fault_test.py
"""

import http.server
import json
import os
import pathlib
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from torchrun_test import free_port  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples/train_fashion_mnist.py"
ARGS = ["--steps", "30", "--batch", "32", "--log-every", "10", "--test-limit", "500",
        "--seed", "3"]


class Hang(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(30)

    do_PUT = do_GET

    def log_message(self, *args):
        pass


class Garbage(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"\x01\x02 <<not metadata>>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_PUT = do_GET

    def log_message(self, *args):
        pass


def serve(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run(work, on, faulty=-1, env_fault=None, args=(), max_file_bytes=0):
    """Both ranks to the end; returns ([exit status], [log text])."""
    port = free_port()
    procs, logs = [], []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDTUNE_")
               or k == "CLOUDTUNE_LIBRARY"}
        env.pop("CLOUDTUNE", None)
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   CLOUDTUNE_HISTORY="off")
        if on:
            env.update(CLOUDTUNE="1", CLOUDTUNE_SIDECAR=str(work / "s.jsonl"),
                       CLOUDTUNE_PROFILE=str(work / "p.csv"),
                       CLOUDTUNE_STATE=str(work / "state.json"), CLOUDTUNE_MEASURE_EVERY="5",
                       CLOUDTUNE_REFIT_SECONDS="1", CLOUDTUNE_INSTANCE_TYPE="g4dn.12xlarge")
            if rank == faulty:
                env.update(env_fault or {})
        limit = max_file_bytes if on and rank == faulty else 0

        def pre(limit=limit):
            if limit:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes fail (EFBIG), nobody dies
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        log = open(work / f"rank{rank}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), *ARGS, *args], env=env,
                                      stdout=log, stderr=subprocess.STDOUT, preexec_fn=pre))
    status = []
    for p in procs:
        try:
            status.append(p.wait(timeout=240))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            status.append(-9)
    for log in logs:
        log.close()
    return status, [(work / f"rank{r}.log").read_text() for r in range(2)]


def final_loss(text):
    m = re.findall(r"step 30\s+loss ([0-9.]+)", text)
    return float(m[-1]) if m else float("nan")


class FaultTest(unittest.TestCase):
    baselines = {}

    @classmethod
    def setUpClass(cls):
        lib = os.environ.get("CLOUDTUNE_LIBRARY")
        if not lib or not os.path.exists(lib):
            raise unittest.SkipTest("CLOUDTUNE_LIBRARY is not set to the built plugin")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.hang, cls.garbage = serve(Hang), serve(Garbage)
        cls.busy = socket.socket()
        cls.busy.bind(("127.0.0.1", 0))
        cls.busy.listen(4)

    @classmethod
    def tearDownClass(cls):
        cls.busy.close()
        cls.hang.shutdown()
        cls.garbage.shutdown()
        cls.tmp.cleanup()

    def baseline(self, args):
        key = tuple(args)
        if key not in self.baselines:
            work = pathlib.Path(self.tmp.name) / f"baseline{len(self.baselines)}"
            work.mkdir()
            status, logs = run(work, on=False, args=args)
            self.assertEqual(status, [0, 0], logs[0][-2000:] + logs[1][-2000:])
            self.assertNotIn("cloudtune:", logs[0])
            self.baselines[key] = final_loss(logs[0])
        return self.baselines[key]

    def check(self, name, rank, env=None, said="", args=(), max_file_bytes=0, prepare=None):
        work = pathlib.Path(self.tmp.name) / f"{name}-rank{rank}"
        work.mkdir()
        if prepare:
            env = prepare(work)
        off = self.baseline(list(args))
        t0 = time.time()
        status, logs = run(work, True, rank, env, args, max_file_bytes)
        self.assertEqual(status, [0, 0], logs[0][-3000:] + logs[1][-3000:])
        on = final_loss(logs[0])
        self.assertLess(abs(on - off), 0.01 * off, f"plugin on {on} vs off {off}")
        line = "-"
        if said and rank == 0:
            lines = [l for l in logs[rank].splitlines() if said in l]
            self.assertEqual(len(lines), 1, logs[rank][-3000:])
            line = lines[0]
        print(f"FAULT python {name} rank {rank}: finished, loss on {on:.4f} off {off:.4f}, "
              f"{time.time() - t0:.0f} s; log: {line[:200]}", flush=True)
        return work

    def both(self, name, **kw):
        for rank in (0, 1):
            with self.subTest(rank=rank):
                self.check(name, rank, **kw)

    def test_unwritable_sidecar(self):
        self.both("unwritable_sidecar", env={"CLOUDTUNE_SIDECAR": "/nonexistent/d/s.jsonl"},
                  said="/nonexistent/d/s.jsonl")

    def test_unwritable_profile(self):
        self.both("unwritable_profile", env={"CLOUDTUNE_PROFILE": "/nonexistent/d/p.csv"},
                  said="cannot create /nonexistent/d/p.csv")

    def test_unwritable_state(self):
        self.both("unwritable_state", env={"CLOUDTUNE_STATE": "/nonexistent/d/state.json"},
                  said="cannot save state")

    def test_corrupt_state(self):
        def prepare(work):
            (work / "bad.json").write_text('{"schema":"cloudtune.state/1","sta')
            return {"CLOUDTUNE_STATE": str(work / "bad.json")}
        self.both("corrupt_state", prepare=prepare, said="ignoring saved state")

    def test_http_port_in_use(self):
        port = self.busy.getsockname()[1]
        self.both("http_port_in_use", env={"CLOUDTUNE_HTTP": f"127.0.0.1:{port}"},
                  said=f"cannot listen on 127.0.0.1:{port}: Address already in use")

    def test_metadata_hangs(self):
        url = f"http://127.0.0.1:{self.hang.server_port}"
        self.both("metadata_hangs", env={"CLOUDTUNE_INSTANCE_TYPE": "local",
                                         "CLOUDTUNE_METADATA_URL": url},
                  said="prices unknown: no metadata answer from")

    def test_metadata_garbage(self):
        url = f"http://127.0.0.1:{self.garbage.server_port}"
        self.both("metadata_garbage", env={"CLOUDTUNE_INSTANCE_TYPE": "local",
                                           "CLOUDTUNE_METADATA_URL": url},
                  said="that are not an instance type name")

    def test_full_disk(self):
        self.both("full_disk", max_file_bytes=6000, said="cannot save state")

    def test_nan_gradients(self):
        for rank in (0, 1):
            with self.subTest(rank=rank):
                work = self.check("nan_gradients", rank,
                                  args=["--nan-rank", str(rank), "--nan-steps", "7,8,21"])
                end = [json.loads(l) for l in (work / "s.jsonl").read_text().splitlines()
                       if '"kind":"end"' in l]
                self.assertEqual(len(end), 1)
                self.assertEqual(end[0]["skipped_steps"], 3, end[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
