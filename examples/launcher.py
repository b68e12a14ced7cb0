#!/usr/bin/python3
"""Applies cloudtune's recommendations to a job: runs it under torchrun's elastic agent, watches
the sidecar for `recommendation` records, and when one proposes another worker count or batch,
asks the job to checkpoint and leave (a stop file), then restarts it from its checkpoint with the
proposed configuration — capped to what this machine can run. See docs/python.md.

    /usr/bin/python3 examples/launcher.py --nproc 2 --max-procs 4 -- --epochs 1

Everything after `--` goes to the training script (default examples/train_fashion_mnist.py, which
understands --batch, --checkpoint and --stop-file). The loop ends when the job finishes its
epochs (the checkpoint says `finished`), fails (after torchrun's own --max-restarts), or after
--max-segments restarts.

--elastic MAX runs the job the way a cluster runs it under torch elastic instead: one torchrun
agent per "node" (one worker each; --nnodes=1:MAX, c10d rendezvous on 127.0.0.1, the first agent
hosts the rendezvous store). A recommendation or a revocation notice is applied as a transition
whose every stage is appended to the sidecar as a `transition` record:
  plan         the new worker count and local batch are written to plan.json (the script reads it
               at every (re)start; its learning rate follows the global batch)
  checkpoint   the job is asked to checkpoint (a request file it removes once saved) and goes on
  scale        agents are added (scale up: the others see a node waiting and restart their workers
               into a larger round) or the newest is stopped (scale down, or the node a revocation
               takes: the others' workers fail, and their agents restart them into a smaller
               round); a batch-only change replaces the newest agent
  resumed      the job's next `start` record shows the new world size (it resumed from the
               checkpoint, with the tuner's saved state)
    /usr/bin/python3 examples/launcher.py --elastic 3 --nproc 2 -- --epochs 1
"""

import argparse
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def free_port():
    """A free port on 127.0.0.1 for a rendezvous or a job's master, below the kernel's ephemeral
    range, where the kernel gives no other socket a port: one it chose and we closed could go to
    another process's connection or Gloo listener before torchrun binds it."""
    low = 32768  # Linux's default start of the ephemeral range
    try:
        low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    first = 10000  # above the well-known and most registered service ports
    span = max(low - first, 0)
    start = random.SystemRandom().randrange(span) if span else 0
    for port in [*(first + (start + i) % span for i in range(span)), 0]:  # 0: the kernel's choice
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free port on 127.0.0.1")


def read_records(path, offset=0):
    """Sidecar records (JSON Lines) from byte `offset` on. A line that does not parse (a record
    being written, or a truncated last line of a killed job) is skipped."""
    out = []
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
    except FileNotFoundError:
        pass
    return out


def proposal(rec):
    """(action, replicas, local batch, instance description) of a recommendation record, or None.
    Field names: search/recommend.h Recommendation::ToJson ("proposed": {"config": {...}})."""
    if rec.get("kind") != "recommendation":
        return None
    body = rec.get("recommendation", rec)  # records may nest the document
    cfg = (body.get("proposed") or {}).get("config") or {}
    replicas = cfg.get("replicas")
    if replicas is None and "nodes" in cfg and "gpus_per_node" in cfg:
        replicas = cfg["nodes"] * cfg["gpus_per_node"]
    bsz = cfg.get("local_bsz")
    if not isinstance(replicas, int) or not isinstance(bsz, int) or replicas < 1 or bsz < 1:
        return None
    accum = cfg.get("accum_steps") or 0
    desc = (body.get("proposed") or {}).get("description") or cfg.get("instance_type", "?")
    # The example has no accumulation: the same samples per replica per step as one micro-step.
    return body.get("action", "switch"), replicas, bsz * (accum + 1), desc


def cli_recommendation(a, env, recs, nproc, batch, base_samples):
    """The offline path: `cloudtune recommend` on the job's recorded profile and latest noise
    measurement (the same search the in-job tuner runs), as a recommendation record, or None."""
    meas = [r for r in recs if r.get("kind") == "measurement" and r.get("grad_sqr") is not None
            and r.get("grad_var") is not None]
    profile = env.get("CLOUDTUNE_PROFILE", "")
    if not meas or not os.path.exists(profile):
        return None
    m = meas[-1]
    b0 = float(m.get("base_batch") or 1)
    progress = (base_samples + m["step"] * m["config"]["global_batch"]) / b0
    target = a.target_epochs * a.dataset_size / b0
    cmd = [a.recommend_cli, "recommend", "--profile", profile,
           "--gns", f"{m['grad_sqr']},{m['grad_var']},{b0}",
           "--target-progress", str(target), "--progress", str(min(progress, 0.99 * target)),
           "--current", f"{a.instance_type}:1:{nproc}:{batch}", "--objective", a.objective,
           "--max-nodes", "1", "--min-local-bsz", str(a.min_batch),
           "--max-local-bsz", str(a.max_batch), "--max-accum", "0", "--format", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"launcher: {' '.join(cmd)} failed: {r.stderr.strip()}", flush=True)
        return None
    try:
        doc = json.loads(r.stdout)
    except ValueError as e:
        print(f"launcher: cloudtune recommend printed no JSON ({e})", flush=True)
        return None
    return {"kind": "recommendation", "step": m["step"], "source": "cloudtune recommend", **doc}


def append_record(path, kind, **fields):
    """Appends one sidecar record (cloudtune.sidecar/1) with a single write on an O_APPEND
    descriptor: Linux appends each write whole, so the job's own records and these never mix."""
    rec = {"schema": "cloudtune.sidecar/1", "time": time.time(), "kind": kind, **fields}
    line = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    print(f"launcher: {kind} {fields}", flush=True)


def write_json_atomically(path, doc):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Elastic:
    """A torch elastic job of single-worker agents on this machine (see the module comment)."""

    def __init__(self, a, env, work, train_args):
        self.a, self.env, self.work = a, env, work
        self.port = free_port()
        self.run_id = f"cloudtune-elastic-{os.getpid()}"
        self.plan = work / "plan.json"
        self.request = work / "CHECKPOINT"
        self.ckpt = work / "checkpoint.pt"
        self.sidecar = pathlib.Path(env["CLOUDTUNE_SIDECAR"])
        self.train_args = train_args
        self.agents = []  # Popen, oldest first; agents[0] hosts the rendezvous store

    def start_agent(self):
        host = not self.agents
        cmd = [sys.executable, str(HERE.parent / "python/cloudtune/torchrun.py"),
               "--nnodes", f"1:{self.a.elastic}", "--nproc_per_node", "1",
               "--max_restarts", str(self.a.max_restarts), "--rdzv_backend", "c10d",
               "--rdzv_endpoint", f"127.0.0.1:{self.port}", "--rdzv_id", self.run_id,
               "--rdzv_conf", f"is_host={1 if host else 0},last_call_timeout=3,join_timeout=120",
               "--monitor_interval", "1", self.a.script, "--plan", str(self.plan),
               "--checkpoint", str(self.ckpt), "--checkpoint-request", str(self.request),
               "--on-notice", "checkpoint", "--sigterm", "exit", *self.train_args]
        if host:
            print("launcher: $ " + " ".join(cmd), flush=True)
        self.agents.append(subprocess.Popen(cmd, env=self.env, start_new_session=True))
        if host:
            time.sleep(1)  # let the host agent bind the rendezvous store first

    def stop_newest(self):
        import signal
        agent = self.agents.pop()
        try:
            os.killpg(agent.pid, signal.SIGTERM)  # the agent and its worker
        except ProcessLookupError:
            pass
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()

    def wait_checkpoint(self, timeout=180):
        self.request.touch()
        end = time.time() + timeout
        while self.request.exists() and time.time() < end:
            if all(p.poll() is not None for p in self.agents):
                return False
            time.sleep(0.5)
        return not self.request.exists()

    def wait_start(self, offset, world, timeout=300):
        """The job's first `start` record after byte `offset` with `world` workers."""
        end = time.time() + timeout
        while time.time() < end:
            for r in read_records(self.sidecar, offset):
                if r.get("kind") == "start" and r.get("world_size") == world:
                    return r
            if all(p.poll() is not None for p in self.agents):
                return None
            time.sleep(0.5)
        return None

    def transition(self, cur, want, reason, step):
        (n, b), (w, nb) = cur, want
        frm, to = {"workers": n, "batch": b}, {"workers": w, "batch": nb}
        sc = str(self.sidecar)
        write_json_atomically(self.plan, {"batch": nb, "workers": w, "reason": reason})
        append_record(sc, "transition", stage="plan", step=step, reason=reason, **{"from": frm},
                      to=to)
        ok = self.wait_checkpoint()
        state = checkpoint_state(str(self.ckpt))
        append_record(sc, "transition", stage="checkpoint", step=state.get("step", step),
                      reason=reason, saved=ok, **{"from": frm}, to=to)
        offset = self.sidecar.stat().st_size if self.sidecar.exists() else 0
        if w > n:
            for _ in range(w - n):
                self.start_agent()
        elif w < n:
            for _ in range(n - w):
                self.stop_newest()
        else:  # same workers, another batch: a membership change makes the job restart
            self.stop_newest()
            self.start_agent()
        append_record(sc, "transition", stage="scale", step=state.get("step", step),
                      reason=reason, agents=len(self.agents), **{"from": frm}, to=to)
        started = self.wait_start(offset, w)
        resumed = checkpoint_state(str(self.ckpt)).get("step")
        append_record(sc, "transition", stage="resumed" if started else "failed",
                      step=resumed, reason=reason, **{"from": frm}, to=to,
                      restart_count=(started or {}).get("restart_count"))
        return started is not None

    def run(self):
        a = self.a
        n, batch = max(1, min(a.nproc, a.elastic)), a.batch
        write_json_atomically(self.plan, {"batch": batch, "workers": n, "reason": "start"})
        for _ in range(n):
            self.start_agent()
        recs_path = pathlib.Path(a.recommendations) if a.recommendations else self.sidecar
        seen = {"job": 0, "recs": 0}
        last_change = time.time()
        while self.agents and any(p.poll() is None for p in self.agents):
            time.sleep(a.poll)
            job_recs = read_records(self.sidecar)
            new = job_recs[seen["job"]:]
            seen["job"] = len(job_recs)
            if recs_path != self.sidecar:  # recommendations come from there, not from the job
                new = [r for r in new if r.get("kind") != "recommendation"]
                extra = read_records(recs_path)
                new += extra[seen["recs"]:]
                seen["recs"] = len(extra)
            want, reason, step = None, None, None
            for rec in new:
                if rec.get("kind") == "preemption" and len(self.agents) > 1:
                    # The cloud takes one node: the job re-planned for the rest (its record's
                    # proposal, when it has one, gives the batch).
                    p = proposal({"kind": "recommendation", **(rec.get("recommendation") or {})})
                    nb = p[2] if p else batch
                    want, reason, step = (len(self.agents) - 1, nb), "revocation", rec.get("step")
                    break
                if rec.get("kind") != "recommendation":
                    continue
                p = proposal(rec)
                if p is None or p[0] == "keep":
                    continue
                cand = (max(1, min(p[1], a.elastic)), max(a.min_batch, min(p[2], a.max_batch)))
                if cand != (n, batch):
                    want, reason, step = cand, "recommendation", rec.get("step")
            if want is None:
                continue
            if reason != "revocation" and time.time() - last_change < a.min_segment_seconds:
                continue
            print(f"launcher: {reason} at step {step}: {n} worker(s) x {batch} -> "
                  f"{want[0]} x {want[1]}", flush=True)
            if not self.transition((n, batch), want, reason, step):
                print("launcher: the job did not come back after the transition", flush=True)
                break
            n, batch = want
            last_change = time.time()
        rcs = [p.wait() for p in self.agents]
        rc = next((r for r in rcs if r != 0), 0)
        state = checkpoint_state(str(self.ckpt))
        print(f"launcher: elastic job exited {rc}; checkpoint {state}", flush=True)
        return rc if rc != 0 or state.get("finished") else 1


def checkpoint_state(path):
    if not os.path.exists(path):
        return {}
    try:
        import torch  # only for reading the checkpoint's small header fields
        ck = torch.load(path, map_location="cpu")
        return {k: ck[k] for k in ("step", "samples", "world", "batch", "lr", "finished")
                if k in ck}
    except Exception as e:  # a corrupt checkpoint: report, let the job decide
        print(f"launcher: cannot read checkpoint {path}: {e}", flush=True)
        return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=2, help="workers of the first segment")
    ap.add_argument("--batch", type=int, default=64, help="local batch of the first segment")
    ap.add_argument("--max-procs", type=int, default=min(4, os.cpu_count() or 1),
                    help="most local worker processes this machine runs (cap on the proposal)")
    ap.add_argument("--min-batch", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=1024)
    ap.add_argument("--script", default=str(HERE / "train_fashion_mnist.py"))
    ap.add_argument("--workdir", default="cloudtune-launch",
                    help="sidecar, profile, state, checkpoint and stop file go here")
    ap.add_argument("--poll", type=float, default=2.0, help="seconds between sidecar reads")
    ap.add_argument("--min-segment-seconds", type=float, default=20,
                    help="let a configuration run at least this long before switching away")
    ap.add_argument("--max-segments", type=int, default=6)
    ap.add_argument("--max-restarts", type=int, default=1, help="torchrun's restarts on failure")
    ap.add_argument("--instance-type", default="local",
                    help="what this machine counts as (CLOUDTUNE_INSTANCE_TYPE; a catalog type "
                    "such as g4dn.12xlarge lets the search price it)")
    ap.add_argument("--recommend-cli", default="",
                    help="path of the `cloudtune` CLI: when the job writes no recommendation "
                    "records, run `cloudtune recommend` on its profile every --recommend-every s")
    ap.add_argument("--recommend-every", type=float, default=10)
    ap.add_argument("--objective", default="cost", choices=["cost", "time"])
    ap.add_argument("--target-epochs", type=float, default=1,
                    help="the job's target, for --recommend-cli's progress (epochs)")
    ap.add_argument("--dataset-size", type=int, default=60000, help="samples per epoch")
    ap.add_argument("--elastic", type=int, default=0, metavar="MAX",
                    help="run under torch elastic with 1..MAX single-worker agents and apply "
                    "recommendations by scaling them (see the module comment); 0 = restart mode")
    ap.add_argument("--recommendations", default="",
                    help="--elastic: follow the recommendation records of this JSON Lines file "
                    "(another controller's, or a test's) instead of the job's own; revocation "
                    "notices still come from the job's sidecar")
    ap.add_argument("train_args", nargs=argparse.REMAINDER,
                    help="-- then the training script's own flags")
    a = ap.parse_args()
    train_args = a.train_args[1:] if a.train_args[:1] == ["--"] else a.train_args
    if a.nproc < 1 or a.max_procs < 1 or a.batch < 1 or a.min_batch > a.max_batch:
        ap.error("--nproc, --max-procs, --batch must be >= 1 and --min-batch <= --max-batch")

    work = pathlib.Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    sidecar = work / "cloudtune.sidecar.jsonl"
    ckpt = work / "checkpoint.pt"
    stop = work / "STOP"
    env = dict(os.environ)
    env.setdefault("CLOUDTUNE", "1")
    env.setdefault("CLOUDTUNE_SIDECAR", str(sidecar))
    env.setdefault("CLOUDTUNE_PROFILE", str(work / "cloudtune.profile.csv"))
    env.setdefault("CLOUDTUNE_STATE", str(work / "cloudtune.state.json"))
    env.setdefault("CLOUDTUNE_INSTANCE_TYPE", a.instance_type)
    sidecar = pathlib.Path(env["CLOUDTUNE_SIDECAR"])

    if a.elastic:
        if a.elastic < 1:
            ap.error("--elastic must be >= 1")
        return Elastic(a, env, work, train_args).run()

    nproc, batch = min(a.nproc, a.max_procs), a.batch
    for segment in range(1, a.max_segments + 1):
        if stop.exists():
            stop.unlink()
        offset = sidecar.stat().st_size if sidecar.exists() else 0
        port = free_port()
        # torchrun (python/cloudtune/torchrun.py fixes its option parsing on Python >= 3.11).
        cmd = [sys.executable, str(HERE.parent / "python/cloudtune/torchrun.py"), "--nnodes", "1",
               "--nproc_per_node", str(nproc), "--max_restarts", str(a.max_restarts),
               "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
               "--rdzv_id", f"cloudtune-{os.getpid()}-{segment}", "--monitor_interval", "1",
               a.script, "--batch", str(batch), "--checkpoint", str(ckpt),
               "--stop-file", str(stop), *train_args]
        print(f"launcher: segment {segment}: {nproc} worker(s), local batch {batch}", flush=True)
        print("launcher: $ " + " ".join(cmd), flush=True)
        start = time.time()
        base_samples = checkpoint_state(str(ckpt)).get("samples", 0)
        job = subprocess.Popen(cmd, env=env)
        nxt, seen, last_cli, in_job = None, 0, start, False
        while job.poll() is None:
            time.sleep(a.poll)
            recs = read_records(sidecar, offset)
            new = recs[seen:]
            seen = len(recs)
            in_job = in_job or any(r.get("kind") == "recommendation" for r in new)
            if a.recommend_cli and not in_job and time.time() - last_cli >= a.recommend_every:
                last_cli = time.time()
                rec = cli_recommendation(a, env, recs, nproc, batch, base_samples)
                if rec:
                    new.append(rec)
            for rec in new:
                p = proposal(rec)
                if p is None:
                    continue
                action, replicas, bsz, desc = p
                want = (max(1, min(replicas, a.max_procs)),
                        max(a.min_batch, min(bsz, a.max_batch)))
                print(f"launcher: recommendation at step {rec.get('step')}: {action} {desc} "
                      f"-> here {want[0]} worker(s), local batch {want[1]}", flush=True)
                nxt = want if action != "keep" and want != (nproc, batch) else None
            if nxt and not stop.exists() and time.time() - start >= a.min_segment_seconds:
                print("launcher: applying it: asking the job to checkpoint and stop", flush=True)
                stop.touch()
        rc = job.returncode
        state = checkpoint_state(str(ckpt))
        print(f"launcher: segment {segment} exited {rc} after {time.time() - start:.0f} s; "
              f"checkpoint {state}", flush=True)
        if rc != 0:
            print(f"launcher: the job failed (exit {rc}) after torchrun's restarts; giving up",
                  flush=True)
            return rc
        if state.get("finished"):
            print("launcher: training finished", flush=True)
            return 0
        if nxt:
            nproc, batch = nxt
    print(f"launcher: stopping after {a.max_segments} segments", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
