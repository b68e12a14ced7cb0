"""Step-time overhead of cloudtune.attach on the Fashion-MNIST CNN, tuner on vs off interleaved in
one run: two identical DDP models on the same process group, one with the tuner attached (CLOUDTUNE=1
comm hook + step wrapper) and one plain (DDP's built-in all-reduce); every iteration steps both, in
random order, on the same batch, and times each step (forward, backward, all-reduce, optimizer).
Not a CTest test (timings on a shared machine); run by hand:

    CLOUDTUNE=1 CLOUDTUNE_SIDECAR=/tmp/bench.jsonl CLOUDTUNE_LIBRARY=build/lib/libcloudtune_plugin.so \\
      /usr/bin/python3 python/cloudtune/torchrun.py --nproc_per_node 2 \\
      tests/python/overhead_bench.py --steps 400
"""

import argparse
import pathlib
import random
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "examples"))
import cloudtune  # noqa: E402
from train_fashion_mnist import Net, load  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x_train, y_train = load("/usr/share/datasets/fashion-mnist", "train")

    def make():
        torch.manual_seed(1)
        model = torch.nn.parallel.DistributedDataParallel(Net())
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    on_model, on_opt = make()
    off_model, off_opt = make()
    tuner = cloudtune.attach(on_model, on_opt, local_bsz=a.batch)
    if not tuner.active:
        sys.exit("overhead_bench: the tuner is off; run with CLOUDTUNE=1")

    def step(model, opt, x, y):
        t = time.perf_counter()
        F.nll_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    rng = random.Random(1234)  # same order on every rank (collectives must match)
    times = {"on": [], "off": []}
    for i in range(a.warmup + a.steps):
        idx = torch.randint(0, x_train.shape[0], (a.batch,),
                            generator=torch.Generator().manual_seed(i * world + rank))
        x, y = x_train[idx], y_train[idx]
        order = ["on", "off"] if rng.random() < 0.5 else ["off", "on"]
        for which in order:
            dt = step(on_model, on_opt, x, y) if which == "on" else step(off_model, off_opt, x, y)
            if i >= a.warmup:
                times[which].append(dt)
    cloudtune.shutdown()
    if rank == 0:
        on, off = times["on"], times["off"]
        ratios = [p / q for p, q in zip(on, off)]  # paired by iteration
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(1000))
        print(f"overhead_bench: {world} workers, local batch {a.batch}, {a.steps} paired steps")
        print(f"  step time off: median {statistics.median(off) * 1e3:.2f} ms, "
              f"mean {statistics.mean(off) * 1e3:.2f} ms")
        print(f"  step time on:  median {statistics.median(on) * 1e3:.2f} ms, "
              f"mean {statistics.mean(on) * 1e3:.2f} ms")
        print(f"  on/off: ratio of medians {statistics.median(on) / statistics.median(off):.4f}, "
              f"median paired ratio {statistics.median(ratios):.4f} "
              f"(95% bootstrap {boot[25]:.4f}..{boot[974]:.4f})")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
