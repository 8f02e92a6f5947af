"""What the C extension (collectives._fastpath, csrc/fastpath.c) can do, in its own codes.

The extension exports its dtype and op codes (``DTYPES``, ``OPS``); Python never
types them again. It reduces float32/64 with sum and prod, and int32/64 with
sum, prod, max and min: numpy's float max and min treat signed zeros and NaNs
in ways a C comparison does not reproduce.
"""
from __future__ import annotations

import numpy as np

try:
    from .. import _fastpath as C
except ImportError:  # built without a C compiler: every road runs in Python
    C = None

DTYPES = {np.dtype(name): code for name, code in C.DTYPES.items()} if C is not None else {}
OPS = dict(C.OPS) if C is not None else {}


def has_c() -> bool:
    """Whether the extension was built."""
    return C is not None


def c_reduces(dtype, op, pipe: bool = False) -> bool:
    """Whether the C loops reduce ``op`` on ``dtype`` (``pipe``: avg too, a sum divided after)."""
    if C is None or dtype is None:
        return False
    dt = np.dtype(dtype)
    if dt not in DTYPES:
        return False
    if pipe and op == "avg":
        op = "sum"
    return op in OPS and (op in ("sum", "prod") or dt.kind == "i")


def streams(nbytes: int, least: int) -> bool:
    """Whether a copy of ``nbytes`` into a caller's out takes streaming stores (csrc/wait.c):
    from ``least`` bytes (the tuning's stream_min_bytes; 0: never), where the extension is built."""
    return C is not None and 0 < least <= nbytes


def copy_out(to, src, least: int) -> None:
    """``to[...] = src`` into (part of) a caller's out, which no peer reads: with streaming
    stores from ``least`` bytes (as the programs' STREAM op), else numpy's copy."""
    if streams(to.nbytes, least) and to.dtype == src.dtype and to.shape == src.shape \
            and to.flags.c_contiguous and src.flags.c_contiguous:
        C.stream(to.ctypes.data, src.ctypes.data, to.nbytes)
    else:
        np.copyto(to, src)
