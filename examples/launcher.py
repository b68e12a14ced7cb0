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
"""

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def checkpoint_state(path):
    if not os.path.exists(path):
        return {}
    try:
        import torch  # only for reading the checkpoint's small header fields
        ck = torch.load(path, map_location="cpu")
        return {k: ck[k] for k in ("step", "samples", "world", "batch", "finished") if k in ck}
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
