"""Reduction kernels on host (numpy) arrays.

The ring executor calls only these methods, so the CUDA set in
``cuda_kernels.py`` can stand in for it without a change to the algorithms.
Every array argument is a 1-D contiguous view; ``op`` is one of
sum/prod/max/min/band/bor/bxor (avg is sum followed by :meth:`scale`), on a
dtype that takes it (dtypes.check_reduction). numpy's ufuncs on bool arrays
are the logic the table promises: add is or, multiply is and.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import HALF, dtype_name, to_dtype

_HALF_DTYPES = frozenset(to_dtype(name) for name in HALF)
UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
          "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


class NumpyKernels:
    """Kernel set for numpy arrays; half types computed in float32."""

    name = "numpy"
    xp = np
    device = False

    def empty(self, n: int, dtype) -> np.ndarray:
        return np.empty(n, dtype=dtype)

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def reduce(self, op: str, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """out = op(a, b), elementwise. ``out`` may alias ``a`` or ``b``."""
        f = UFUNCS[op]
        if a.dtype in _HALF_DTYPES:
            # compute in float32, round once: the same answer as the CUDA kernel
            out[...] = f(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
        else:
            f(a, b, out=out)

    def reduce_(self, op: str, dst: np.ndarray, src: np.ndarray) -> None:
        """dst = op(dst, src), in place."""
        self.reduce(op, dst, src, dst)

    def scale(self, x: np.ndarray, divisor: int) -> None:
        """x /= divisor in place (the second half of avg). Integers truncate toward zero;
        complex types divide both parts."""
        if x.dtype.kind == "u":
            np.floor_divide(x, x.dtype.type(divisor), out=x)
        elif x.dtype.kind == "i":
            # floor division, then one up where it rounded a negative down: no |x|,
            # which overflows at the type's minimum (a sum of exactly INT_MIN)
            d = x.dtype.type(divisor)
            up = (x < 0) & (np.remainder(x, d) != 0)
            np.floor_divide(x, d, out=x)
            x += up
        elif dtype_name(x.dtype) in HALF:
            x[...] = (x.astype(np.float32) / np.float32(divisor)).astype(x.dtype)
        else:
            np.divide(x, x.dtype.type(divisor), out=x)

    def synchronize(self) -> None:
        """Host kernels finish before they return."""


NUMPY_KERNELS = NumpyKernels()
