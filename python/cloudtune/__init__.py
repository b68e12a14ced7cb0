"""cloudtune for PyTorch users: attach the in-loop tuner to a DistributedDataParallel job.

The logic lives in the C++ plugin (libcloudtune_plugin.so, the same library C++ training loops
link); this module only loads it with ``torch.ops.load_library`` and calls ``torch.ops.cloudtune.*``
at the right places:

    import cloudtune
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    tuner = cloudtune.attach(model, opt)          # after dist.init_process_group
    for x, y in batches:
        loss_fn(model(x), y).backward()
        opt.step(); opt.zero_grad()
        if cloudtune.should_checkpoint(): save()
    cloudtune.shutdown()

Everything is off unless CLOUDTUNE=1 (then the CLOUDTUNE_* variables configure it, see
docs/plugin.md); when off the hook is a plain all-reduce and the step wrapper does nothing else.
See docs/python.md.
"""

import atexit
import os
import sys
import threading
import types

import torch
import torch.distributed as dist

from cloudtune import _locate

__all__ = ["attach", "load_library", "library_path", "enabled", "should_checkpoint", "set_target",
           "shutdown", "Tuner"]

_lock = threading.Lock()
_loaded = None  # path of the loaded library


def library_path(library=None):
    """Where the plugin library is: `library`, else $CLOUDTUNE_LIBRARY, else the install under
    $CLOUDTUNE_PREFIX, else <repo>/build/lib when imported from a source checkout, else an install
    in sys.prefix, /usr/local or /usr (see cloudtune/_locate.py)."""
    if library:
        return str(library)
    return _locate.library_path()


def load_library(library=None):
    """Loads the plugin (once per process) and returns the torch.ops.cloudtune namespace.

    Raises FileNotFoundError naming the path and how to set it when the library is missing.
    """
    global _loaded
    with _lock:
        if _loaded is None:
            path = library_path(library)
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"cloudtune: plugin library '{path}' not found; build the cloudtune_plugin "
                    "target, or install cloudtune (cmake --install <build> --prefix P) and set "
                    "CLOUDTUNE_PREFIX=P, or set CLOUDTUNE_LIBRARY to libcloudtune_plugin.so")
            torch.ops.load_library(path)
            _loaded = path
    return torch.ops.cloudtune


def enabled():
    """Whether the plugin is loaded and measuring (CLOUDTUNE=1 and init succeeded)."""
    return _loaded is not None and bool(torch.ops.cloudtune.enabled())


def should_checkpoint():
    """Whether the job should checkpoint now (e.g. a spot revocation notice was seen)."""
    return _loaded is not None and bool(torch.ops.cloudtune.should_checkpoint())


def set_target(epochs=0, samples=0, steps=0, dataset_size=0):
    """Tells the tuner what counts as finished (the first one given wins; epochs need
    dataset_size). Without a target it ranks configurations by cost per unit of progress."""
    if _loaded is not None:
        torch.ops.cloudtune.set_target(float(epochs), float(samples), float(steps),
                                       float(dataset_size))


def shutdown():
    """Writes the plugin's "end" record and profile. Safe to call twice or when off."""
    if _loaded is not None:
        torch.ops.cloudtune.shutdown()


class Tuner:
    """The hooks of one DDP model + optimizer. Created by attach(); keep a reference if you want
    to set the batch explicitly (set_batch) or restart the step clock (step_begin)."""

    def __init__(self, model, optimizer, ops, local_bsz, micro_steps):
        self._ops = ops
        self._pg = model.process_group
        self._world = dist.get_world_size(self._pg)
        self._fixed_bsz = int(local_bsz or 0)
        self._fixed_micro = int(micro_steps or 0)
        self._seen_bsz = 0  # batch of the last training forward (first dim of the first input)
        self._forwards = 0  # training forwards since the last optimizer step
        self._in_sync = False
        self._groups = optimizer.param_groups
        self.active = ops is not None and bool(ops.enabled())
        self.steps = 0
        self.buckets_last_step = 0
        if self.active:  # off: DDP's built-in all-reduce, nothing of ours on the hot path
            model.register_comm_hook(self, Tuner._comm_hook)
            model.register_forward_pre_hook(self._forward_pre_hook)
            self._wrap_step(optimizer)
            ops.step_begin()

    # -- what the training loop may call -------------------------------------------------------
    def set_batch(self, local_bsz, micro_steps=1):
        """Samples per replica per micro-step, and micro-steps per optimizer step, from now on
        (overrides what the forward hook infers)."""
        self._fixed_bsz = int(local_bsz)
        self._fixed_micro = int(micro_steps)

    def skipped_step(self):
        """The training loop skipped optimizer.step() (non-finite gradients, as a loss scaler does):
        the step's gradients and time are handed over as a step would hand them (the plugin skips
        non-finite gradients and counts them), so the next step starts clean."""
        if self.active:
            self._before_step()
            self._after_step()

    def step_begin(self):
        """Restarts the step clock (e.g. after evaluation or checkpointing between steps)."""
        if self.active:
            self._ops.step_begin()
            self._in_sync = False

    # -- hooks ---------------------------------------------------------------------------------
    def _forward_pre_hook(self, module, inputs):
        if not (module.training and torch.is_grad_enabled()):
            return
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.dim() > 0:
                self._seen_bsz = int(x.shape[0])
                break
        self._forwards += 1

    @staticmethod
    def _comm_hook(self, bucket):
        """DDP communication hook: all-reduce the bucket (mean) with its local squared norm as one
        extra element when the tuner is on (plugin/python_ops.cpp)."""
        buf = bucket.buffer()
        world = self._world
        if not self.active or world < 2:
            fut = dist.all_reduce(buf, group=self._pg, async_op=True).get_future()
            return fut.then(lambda f: f.value()[0].div_(world))
        ops = self._ops
        if not self._in_sync:
            ops.sync_begin()  # the first bucket's gradients are ready: communication starts
            self._in_sync = True
        slot = ops.bucket_local(buf)
        flat = torch.cat([buf.reshape(-1), buf.new_full((1,), slot)])
        fut = dist.all_reduce(flat, group=self._pg, async_op=True).get_future()

        def done(f):
            out = f.value()[0].div_(world)
            buf.copy_(out[:-1].view_as(buf))
            ops.bucket_reduced(buf, float(out[-1]))
            return buf

        return fut.then(done)

    def _wrap_step(self, optimizer):
        if hasattr(optimizer, "register_step_pre_hook"):  # torch >= 2.0
            optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._before_step())
            optimizer.register_step_post_hook(lambda opt, args, kwargs: self._after_step())
            return
        inner = optimizer.step  # bound method (or a scheduler's wrapper of it)
        tuner = self

        def step(opt_self, *args, **kwargs):
            tuner._before_step()
            result = inner(*args, **kwargs)
            tuner._after_step()
            return result

        # A bound method, so that torch.optim.lr_scheduler can wrap it again.
        optimizer.step = types.MethodType(step, optimizer)

    def _before_step(self):
        ops = self._ops
        ops.sync_end()  # DDP waited for every bucket before backward() returned
        self._in_sync = False
        micro = self._fixed_micro or max(self._forwards, 1)
        if self._world < 2:
            # One replica: the plugin pairs consecutive steps' gradients (flagged biased).
            grads = [p.grad for g in self._groups for p in g["params"] if p.grad is not None]
            ops.grads_reduced(grads, 0.0)
        else:
            self.buckets_last_step = int(ops.buckets_done(micro))

    def _after_step(self):
        bsz = self._fixed_bsz or self._seen_bsz
        micro = self._fixed_micro or max(self._forwards, 1)
        self._forwards = 0
        if bsz > 0:
            self._ops.step_end(bsz, micro)
            self.steps += 1
        self._ops.step_begin()


def _all_ranks(ok, pg, world):
    """True when `ok` holds on every rank of `pg` (one tiny all-reduce on the job's own group);
    None, after one line on stderr, when the all-reduce fails (a rank has gone)."""
    if world < 2:
        return ok
    device = torch.device("cpu")
    if dist.get_backend(pg) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    try:
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=pg)
    except RuntimeError as e:  # a rank is gone: the job's own next collective says so
        print(f"cloudtune: rank {dist.get_rank(pg)}: the ranks could not agree to start the tuner "
              f"({e}); tuner off", file=sys.stderr, flush=True)
        return None
    return bool(flag.item())


def attach(model, optimizer, library=None, local_bsz=0, micro_steps=0):
    """Attaches the tuner to a DistributedDataParallel `model` and its `optimizer`.

    Call after torch.distributed.init_process_group and before the first backward. Loads the
    plugin (library: path of libcloudtune_plugin.so; default: see library_path()), starts it (on
    only with CLOUDTUNE=1), registers the communication hook and wraps optimizer.step.
    `local_bsz` (samples per replica per micro-step) and `micro_steps` (forwards per optimizer
    step) are inferred from the model's training forwards when 0.
    Returns the Tuner (inactive, with one line on stderr, when the library cannot be loaded).
    """
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError("cloudtune.attach: model must be a torch.nn.parallel."
                        f"DistributedDataParallel, not {type(model).__name__}")
    pg = model.process_group
    rank, world = dist.get_rank(pg), dist.get_world_size(pg)
    ops, error = None, None
    try:
        ops = load_library(library)
    except (FileNotFoundError, OSError, RuntimeError) as e:
        error = e
    # Every rank must agree before any of them adds the noise-scale element to its all-reduce:
    # a rank without the library turns the tuner off everywhere (the plugin's own init then agrees
    # on its settings, sidecar and the rest through the job's store).
    agreed = _all_ranks(ops is not None, pg, world)
    if agreed is None:
        return Tuner(model, optimizer, None, local_bsz, micro_steps)
    if not agreed:
        # Never stop the training job for the tuner: one line per rank, and train without it.
        why = f"{error}" if error else "the plugin library could not be loaded on another rank"
        print(f"cloudtune: rank {rank}: {why}; tuner off on every rank", file=sys.stderr,
              flush=True)
        return Tuner(model, optimizer, None, local_bsz, micro_steps)
    ops.init(rank, world, int(local_bsz or 0), int(micro_steps or 1), 0)
    tuner = Tuner(model, optimizer, ops, local_bsz, micro_steps)
    # The parameters' shapes identify the model in the job history (warm start).
    ops.note_model([p.detach() for p in model.parameters() if p.requires_grad])
    atexit.register(shutdown)
    return tuner
