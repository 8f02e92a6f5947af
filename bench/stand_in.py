"""Whether this process's cupy is the host stand-in (bench/cupy_on_host): asked here and nowhere else.

    sys.path.append(str(ROOT / "bench"))    # appended: bench/collectives.py is not the package
    from stand_in import not_on_host, on_host_stand_in
    if on_host_stand_in():
        print(not_on_host("ring-ipc", "CUDA IPC handles need a GPU's driver"))

    python bench/stand_in.py    # exit status 0 under the stand-in, 1 under a real cupy (gpu_check.sh)

The stand-in marks itself (``cupy.HOST_STAND_IN = True``; real cupy has no such name). A check
the stand-in cannot perform at all (CUDA IPC, libcuda, NCCL, MPS, a device's timings or driver
facts) prints ``INFO name: not on the host stand-in: why`` there instead of PASS or FAIL; under a
real cupy every check runs as it always does. No script takes an error for the stand-in: the
marker is the only sign.
"""
from __future__ import annotations

import sys

MARKER = "HOST_STAND_IN"


def on_host_stand_in(cp=None) -> bool:
    """True when ``cp`` (default: ``import cupy``) is bench/cupy_on_host's stand-in."""
    if cp is None:
        import cupy as cp
    return getattr(cp, MARKER, False) is True


def not_on_host(name: str, why: str) -> str:
    """The INFO line of a check the stand-in cannot perform."""
    return f"INFO {name}: not on the host stand-in: {why}"


if __name__ == "__main__":
    sys.exit(0 if on_host_stand_in() else 1)
