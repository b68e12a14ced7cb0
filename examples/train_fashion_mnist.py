#!/usr/bin/python3
"""Data-parallel training of a small CNN on Fashion-MNIST (DistributedDataParallel over Gloo), with
the cloudtune tuner attached (lines marked [cloudtune]). The Python twin of
examples/train_fashion_mnist.cpp: same network, same data.

    /usr/bin/python3 python/cloudtune/torchrun.py --nproc_per_node 2 \\
        examples/train_fashion_mnist.py --epochs 1              # tuner off
    CLOUDTUNE=1 /usr/bin/python3 python/cloudtune/torchrun.py --nproc_per_node 2 \\
        examples/train_fashion_mnist.py --epochs 1              # tuner on: cloudtune.sidecar.jsonl

python/cloudtune/torchrun.py is `python3 -m torch.distributed.run` with a fix for torch 1.13 on
Python >= 3.11 (plain torchrun there needs `--redirects 1 --tee 1`; see docs/python.md).

Elastic: every optimizer step takes the next `world x batch` samples of the epoch's (seeded)
permutation and each rank its own slice of them, so a run restarted from --checkpoint with another
worker count or batch continues exactly where the previous one stopped (examples/launcher.py).
"""

import argparse
import gzip
import os
import pathlib
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
import cloudtune  # noqa: E402  [cloudtune]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), 1)


def read_idx(path):
    """Reads an IDX file (gzip or plain) into a numpy array; ValueError names the file."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(dims)):
        raise ValueError(f"{path}: {len(data) - offset} data bytes, header says {dims}")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def load(root, split):
    def find(name):
        for candidate in (f"{root}/{name}.gz", f"{root}/{name}"):
            if os.path.exists(candidate):
                return candidate
        raise FileNotFoundError(f"{root}/{name}[.gz] not found (Debian: dataset-fashion-mnist)")

    prefix = "train" if split == "train" else "t10k"
    images = read_idx(find(f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - 0.2860) / 0.3530
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def save_checkpoint(path, model, optimizer, state):
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), **state},
               tmp)
    os.replace(tmp, path)  # write-then-rename: a killed save never leaves a half-written file


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=float, default=2, help="train until this many epochs in total")
    ap.add_argument("--steps", type=int, default=0,
                    help="stop this run after N optimizer steps (0 = run to --epochs)")
    ap.add_argument("--batch", type=int, default=64, help="local batch (samples per worker)")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (momentum 0.9)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    ap.add_argument("--log-every", type=int, default=100, help="steps between progress lines")
    ap.add_argument("--test-limit", type=int, default=0,
                    help="score at most N test samples (0 = all 10000)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--checkpoint", default="",
                    help="save model+optimizer+position here (rank 0) and resume from it")
    ap.add_argument("--checkpoint-every", type=int, default=0,
                    help="also save every N steps (0 = only at the end and on a stop request)")
    ap.add_argument("--stop-file", default="",
                    help="when this file appears: checkpoint and exit 0 (the launcher's signal)")
    ap.add_argument("--check-every", type=int, default=20,
                    help="steps between the (collective) stop / should_checkpoint checks")
    ap.add_argument("--plan", default="",
                    help="JSON file an elastic launcher writes ({\"batch\": B}): read at every "
                    "(re)start, it overrides --batch; the learning rate follows the global batch "
                    "(linear scaling from the first run's)")
    ap.add_argument("--checkpoint-request", default="",
                    help="when this file appears: checkpoint, remove it and go on training")
    ap.add_argument("--sigterm", choices=["checkpoint", "exit"], default="checkpoint",
                    help="on SIGTERM: agree a stop with the other ranks, checkpoint and exit 0; or "
                    "exit at once (under torch elastic, whose agent sends SIGTERM to restart its "
                    "workers into a new round: an exit 0 would end the job)")
    ap.add_argument("--nan-rank", type=int, default=-1,
                    help="this rank's gradients are NaN at the --nan-steps (what an fp16 overflow "
                    "gives); every rank then skips the step, as a loss scaler does")
    ap.add_argument("--nan-steps", default="", help="comma-separated optimizer steps (1-based)")
    ap.add_argument("--on-notice", choices=["stop", "checkpoint"], default="stop",
                    help="on a spot revocation notice: checkpoint and exit (stop), or checkpoint "
                    "once and go on until the launcher morphs the job (checkpoint)")
    ap.add_argument("--fail-rank", type=int, default=-1,
                    help="on the job's first attempt (TORCHELASTIC_RESTART_COUNT 0) this rank "
                    "exits with status 3 at --fail-step: a worker failure for torchrun to restart")
    ap.add_argument("--fail-step", type=int, default=0,
                    help="optimizer steps done when --fail-rank exits (0: before the tuner starts)")
    a = ap.parse_args()
    try:
        nan_steps = {int(v) for v in a.nan_steps.split(",") if v.strip()}
    except ValueError:
        ap.error(f"--nan-steps: {a.nan_steps!r} is not a comma-separated list of steps")
    if a.plan and os.path.exists(a.plan):
        import json
        with open(a.plan) as f:
            plan = json.load(f)
        if not isinstance(plan.get("batch"), int) or plan["batch"] < 1:
            ap.error(f"{a.plan}: 'batch' must be a positive integer, not {plan.get('batch')!r}")
        a.batch = plan["batch"]
    if a.batch < 1 or a.epochs <= 0 or a.lr <= 0 or a.log_every < 1 or a.check_every < 1:
        ap.error("--batch, --epochs, --lr, --log-every, --check-every must be positive")
    if a.fail_step < 0:
        ap.error(f"--fail-step must be 0 or more, not {a.fail_step}")

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank, world = dist.get_rank(), dist.get_world_size()

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    stop = {"signal": False}
    if a.sigterm == "checkpoint":
        signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("signal", True))

    x_train, y_train = load(a.data, "train")
    x_test, y_test = load(a.data, "test")
    n = x_train.shape[0]

    torch.manual_seed(a.seed)
    net = Net()
    model = nn.parallel.DistributedDataParallel(net)  # broadcasts rank 0's weights
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    samples, step = 0, 0  # global samples consumed and optimizer steps, over all runs
    base_global = world * a.batch  # the global batch --lr is meant for (the first run's)
    if a.checkpoint and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint, map_location="cpu")
        net.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        samples, step = int(ck["samples"]), int(ck["step"])
        base_global = int(ck.get("base_global_batch", base_global))
        log(f"resumed from {a.checkpoint}: step {step}, epoch {samples / n:.3f} "
            f"(saved by {ck.get('world', '?')} worker(s) at local batch {ck.get('batch', '?')})")
    # Linear scaling rule: the learning rate follows the global batch (Goyal et al. 2017).
    lr = a.lr * world * a.batch / base_global
    for group in optimizer.param_groups:
        group["lr"] = lr

    # A worker failure for torchrun to restart (--fail-rank): on the first attempt only.
    fails = rank == a.fail_rank and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if fails and a.fail_step == 0:
        os._exit(3)
    tuner = cloudtune.attach(model, optimizer, local_bsz=a.batch)  # [cloudtune]
    log(f"train_fashion_mnist.py: {world} worker(s), local batch {a.batch}, lr {lr:g}, "
        f"{n} training samples, tuner {'on' if tuner.active else 'off'}")

    def state():
        return {"samples": samples, "step": step, "world": world, "batch": a.batch, "lr": lr,
                "base_global_batch": base_global}

    noticed = False  # --on-notice checkpoint: the notice was acted on

    t0 = time.time()
    target = int(a.epochs * n)
    global_batch = world * a.batch
    run_steps, loss_sum, window, t_window = 0, 0.0, 0, time.time()
    stopped = False
    perm_epoch, perm = -1, None
    model.train()
    while samples + global_batch <= target:
        epoch = samples // n
        if epoch != perm_epoch:  # same permutation on every rank (seeded by the epoch)
            g = torch.Generator().manual_seed(a.seed * 1000003 + epoch)
            perm, perm_epoch = torch.randperm(n, generator=g), epoch
        start = samples % n + rank * a.batch
        idx = perm[torch.arange(start, start + a.batch) % n]
        x, y = x_train[idx], y_train[idx]
        loss = F.nll_loss(model(x), y)
        poisoned = rank == a.nan_rank and step + 1 in nan_steps
        (loss * float("nan") if poisoned else loss).backward()
        if all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
            optimizer.step()  # cloudtune times the step and folds in the gradient noise
        else:  # the all-reduced gradient is not finite on any rank: every rank skips the step
            tuner.skipped_step()  # [cloudtune] the step happened, without an update
        optimizer.zero_grad(set_to_none=True)
        samples += global_batch
        step += 1
        run_steps += 1
        if fails and step == a.fail_step:
            os._exit(3)
        loss_sum += loss.item()
        window += 1
        if step % a.log_every == 0:
            dt = time.time() - t_window
            log(f"epoch {samples / n:.3f} step {step}  loss {loss_sum / window:.4f}  "
                f"{window * global_batch / dt:.0f} samples/s")
            loss_sum, window, t_window = 0.0, 0, time.time()
        if a.checkpoint and a.checkpoint_every and step % a.checkpoint_every == 0 and rank == 0:
            save_checkpoint(a.checkpoint, model, optimizer, state())
            tuner.step_begin()  # the save is not part of the next step's time
        if a.steps and run_steps >= a.steps:
            break
        if run_steps % a.check_every == 0:
            # All ranks must act at the same step: agree with one tiny all-reduce (MAX) of
            # [leave, checkpoint and go on].
            notice = cloudtune.should_checkpoint()
            leave = stop["signal"] or (notice and a.on_notice == "stop") or (
                bool(a.stop_file) and os.path.exists(a.stop_file))
            keep = (notice and a.on_notice == "checkpoint" and not noticed) or (
                bool(a.checkpoint_request) and os.path.exists(a.checkpoint_request))
            flag = torch.tensor([1.0 if leave else 0.0, 1.0 if keep else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag[0].item() > 0:
                log(f"stop requested at step {step}: checkpointing and leaving")
                stopped = True
                break
            if flag[1].item() > 0:
                noticed = noticed or notice
                if a.checkpoint and rank == 0:
                    save_checkpoint(a.checkpoint, model, optimizer, state())
                    log(f"checkpoint {a.checkpoint}: step {step} (requested)")
                    if a.checkpoint_request and os.path.exists(a.checkpoint_request):
                        os.remove(a.checkpoint_request)
                dist.barrier()  # the others wait for the save: nobody runs ahead of it
            tuner.step_begin()

    finished = samples + global_batch > target
    if a.checkpoint and rank == 0:
        save_checkpoint(a.checkpoint, model, optimizer, {**state(), "finished": finished})
        log(f"checkpoint {a.checkpoint}: step {step}, epoch {samples / n:.3f}")

    # Test accuracy: each rank scores its slice; one all-reduce of the counts.
    model.eval()
    n_test = min(a.test_limit, x_test.shape[0]) if a.test_limit > 0 else x_test.shape[0]
    correct = 0.0
    with torch.no_grad():
        for i in range(rank * 1000, n_test, world * 1000):
            xs, ys = x_test[i:min(i + 1000, n_test)], y_test[i:min(i + 1000, n_test)]
            correct += float((net(xs).argmax(1) == ys).sum())
    counts = torch.tensor([correct], dtype=torch.float64)
    dist.all_reduce(counts)
    log(f"done: {run_steps} steps this run ({step} in all), epoch {samples / n:.3f}, "
        f"test accuracy {counts[0].item() / n_test:.4f} ({time.time() - t0:.0f} s)"
        + (" [stopped for restart]" if stopped else ""))
    cloudtune.shutdown()  # [cloudtune] the "end" record and the profile
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
