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
