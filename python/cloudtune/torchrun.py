"""`python3 -m torch.distributed.run` (torchrun) with a fix for Debian's python3-torch 1.13 on
Python >= 3.11.

torch 1.13's Std.from_str("0") looks the value up by iterating the Std IntFlag; since Python 3.11
iteration skips the zero member NONE and the multi-bit member ALL, so the default `--redirects 0
--tee 0` becomes None and torchrun dies with "AttributeError: 'NoneType' object has no attribute
'get'" before starting any worker. This wrapper replaces that lookup with Std(int(v)) and then runs
torchrun unchanged (same flags, same elastic agent):

    /usr/bin/python3 python/cloudtune/torchrun.py --nproc_per_node 2 examples/train_fashion_mnist.py
    PYTHONPATH=python /usr/bin/python3 -m cloudtune.torchrun --nproc_per_node 2 ...
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api as _mp_api


def _needs_fix():
    try:
        return _mp_api.Std.from_str("0") is None or _mp_api.Std.from_str("3") is None
    except Exception:
        return True


def _from_str(cls, vm):
    """Std.from_str of torch 1.13 with a lookup that works on every Python version."""
    if re.fullmatch(r"[0-3]", vm):
        return cls(int(vm))
    if re.fullmatch(r"(\d:[0-3],)*\d:[0-3]", vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"'{vm}' is neither a value 0-3 nor a mapping like 0:1,1:3")


def patch():
    """Installs the fix when this torch needs it (idempotent)."""
    if _needs_fix():
        _mp_api.Std.from_str = classmethod(_from_str)


def main(argv=None):
    patch()
    from torch.distributed import run
    run.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
