"""Reduction kernels on host (numpy) arrays.

The ring executor calls only these methods, so the CUDA set in
``cuda_kernels.py`` can stand in for it without a change to the algorithms.
Every array argument is a 1-D contiguous view; ``op`` is one of
sum/prod/max/min (avg is sum followed by :meth:`scale`).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import HALF, dtype_name, to_dtype
from . import numpy_optim

_HALF_DTYPES = frozenset(to_dtype(name) for name in HALF)
_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


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
        f = _UFUNCS[op]
        if a.dtype in _HALF_DTYPES:
            # compute in float32, round once: the same answer as the CUDA kernel
            out[...] = f(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
        else:
            f(a, b, out=out)

    def reduce_(self, op: str, dst: np.ndarray, src: np.ndarray) -> None:
        """dst = op(dst, src), in place."""
        self.reduce(op, dst, src, dst)

    def scale(self, x: np.ndarray, divisor: int) -> None:
        """x /= divisor in place (the second half of avg). Integers truncate toward zero."""
        if x.dtype.kind in "iu":  # C division; abs() would overflow at the type's minimum
            d = x.dtype.type(divisor)
            np.copyto(x, (x // d + ((x % d != 0) & (x < 0))).astype(x.dtype))
        elif dtype_name(x.dtype) in HALF:
            x[...] = (x.astype(np.float32) / np.float32(divisor)).astype(x.dtype)
        else:
            np.divide(x, x.dtype.type(divisor), out=x)

    def synchronize(self) -> None:
        """Host kernels finish before they return."""

    # ------------------------------------------ optimizer steps and casts
    # Appended for sharding/: the math is stated in numpy_optim.py; the CUDA
    # set implements the same signatures as fused kernels.
    def adamw_step(self, param, grad, exp_avg, exp_avg_sq, *, lr, beta1, beta2, eps, weight_decay, step,
                   grad_scale=1.0, out_lowp=None) -> None:
        """torch.optim.AdamW's update, in place on flat float32 arrays (see numpy_optim.adamw_step)."""
        numpy_optim.adamw_step(param, grad, exp_avg, exp_avg_sq, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                               weight_decay=weight_decay, step=step, grad_scale=grad_scale, out_lowp=out_lowp)

    def sgd_step(self, param, grad, momentum_buf, *, lr, momentum, dampening, weight_decay, nesterov,
                 first_step, grad_scale=1.0, out_lowp=None) -> None:
        """torch.optim.SGD's update, in place on flat float32 arrays (see numpy_optim.sgd_step)."""
        numpy_optim.sgd_step(param, grad, momentum_buf, lr=lr, momentum=momentum, dampening=dampening,
                             weight_decay=weight_decay, nesterov=nesterov, first_step=first_step,
                             grad_scale=grad_scale, out_lowp=out_lowp)

    def cast(self, dst, src) -> None:
        """dst[...] = src converted, round to nearest even (float32 <-> bfloat16/float16)."""
        numpy_optim.cast(dst, src)


NUMPY_KERNELS = NumpyKernels()
