"""numpy references of sharding/kernels/optim.cu and the casts of csrc/cast.cu, the kernels
sharding/optim_cuda.py launches.

Not a second implementation: :func:`adamw` and :func:`sgd` run
optim_numpy.py's steps (the ones that match torch.optim bit for bit, fused
multiply-adds included) on copies and return new arrays, so the CUDA kernels
are held to torch's arithmetic. The half-type roundings come from
collectives/kernels/reference.py, written on bit patterns.
"""
from __future__ import annotations

import numpy as np

from collectives.dtypes import HALF, dtype_name
from collectives.kernels.reference import round_to, widen

from . import optim_numpy

F32 = np.float32


def cast(src: np.ndarray, dst_dtype) -> np.ndarray:
    """float32 <-> bfloat16 / float16, round to nearest even."""
    s, d = dtype_name(src.dtype), dtype_name(dst_dtype)
    if s == "float32" and d in HALF:
        return round_to(src, dst_dtype)
    if s in HALF and d == "float32":
        return widen(src)
    raise TypeError(f"no cast from {s} to {d}")


def _flat32(a) -> np.ndarray:
    return np.array(a, dtype=F32).reshape(-1)


def adamw(param, grad, exp_avg, exp_avg_sq, *, lr, beta1, beta2, eps, weight_decay, step,
          grad_scale=1.0, lowp_dtype=None):
    """One AdamW step on float32 arrays; returns new (param, exp_avg, exp_avg_sq, lowp or None).

    Args:
      param, grad, exp_avg, exp_avg_sq: float32 arrays of one size (not modified).
      lr, beta1, beta2, eps, weight_decay, step, grad_scale: as optim_numpy.adamw_step.
      lowp_dtype: bfloat16 or float16 for a rounded copy of the new param, or None.
    """
    p, m, v = (_flat32(a) for a in (param, exp_avg, exp_avg_sq))
    optim_numpy.adamw_step(p, np.ascontiguousarray(grad, dtype=F32).reshape(-1), m, v, lr=lr, beta1=beta1,
                           beta2=beta2, eps=eps, weight_decay=weight_decay, step=step, grad_scale=grad_scale)
    return p, m, v, None if lowp_dtype is None else round_to(p, lowp_dtype)


def sgd(param, grad, momentum_buf, *, lr, momentum, dampening, weight_decay, nesterov, first_step,
        grad_scale=1.0, lowp_dtype=None):
    """One SGD step on float32 arrays; returns new (param, momentum_buf or None, lowp or None).

    Args:
      param, grad: float32 arrays of one size (not modified).
      momentum_buf: the momentum buffer (None: zeros, or no momentum).
      lr, momentum, dampening, weight_decay, nesterov, first_step, grad_scale: as optim_numpy.sgd_step.
      lowp_dtype: bfloat16 or float16 for a rounded copy of the new param, or None.
    """
    p = _flat32(param)
    buf = None
    if momentum != 0:
        buf = np.zeros(p.size, F32) if momentum_buf is None else _flat32(momentum_buf)
    optim_numpy.sgd_step(p, np.ascontiguousarray(grad, dtype=F32).reshape(-1), buf, lr=lr, momentum=momentum,
                         dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                         first_step=first_step, grad_scale=grad_scale)
    return p, buf, None if lowp_dtype is None else round_to(p, lowp_dtype)
