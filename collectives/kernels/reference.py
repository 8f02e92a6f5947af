"""numpy references of the CUDA kernels in csrc/, written op by op like them.

These are what the GPU tests compare each CUDA kernel with, and what the
CPU tests check against independent formulas (torch, ml_dtypes). The half
type roundings are done here on bit patterns, not through ml_dtypes, so the
check against ml_dtypes and torch means something.

The optimizer references are not a second implementation: :func:`adamw`
and :func:`sgd` run numpy_optim.py's steps (the ones that match
torch.optim bit for bit, fused multiply-adds included) on copies, so the
CUDA kernels are held to torch's arithmetic. The float32 constants the CUDA
launch passes are computed in :func:`adamw_scalars` and :func:`sgd_scalars`.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import HALF, bfloat16, dtype_name
from . import numpy_optim

F32 = np.float32
_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


# ------------------------------------------------------------ half types
def bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, round to nearest even; NaN -> quiet NaN."""
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def f16_bits(x) -> np.ndarray:
    """float32 -> IEEE half bit patterns, round to nearest even (subnormals, overflow to inf)."""
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.int64)
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    r = a - 0x38000000  # rebias the exponent from 127 to 15
    normal = (r + 0xFFF + ((r >> 13) & 1)) >> 13
    # below 2^-14: a multiple of 2^-24, rounded to nearest even (exact in float64)
    with np.errstate(invalid="ignore"):  # signalling NaNs; masked out below
        mag = np.where(a < 0x38800000, np.abs(np.asarray(x, dtype=F32).astype(np.float64)), 0.0)
    sub = np.rint(mag * 2.0 ** 24).astype(np.int64)
    h = np.where(a < 0x38800000, sub, normal)
    h = np.where(a >= 0x477FF000, 0x7C00, h)  # >= 65520 rounds to inf
    h = np.where(a > 0x7F800000, 0x7E00, h)
    return (sign | h).astype(np.uint16)


def bf16_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(F32)


def f16_to_f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(F32)


def round_to(x, dtype) -> np.ndarray:
    """float32 values rounded to a half type, as an array of that type."""
    name = dtype_name(dtype)
    if name == "bfloat16":
        return bf16_bits(x).view(bfloat16)
    if name == "float16":
        return f16_bits(x).view(np.float16)
    raise TypeError(f"round_to: {name} is not a half type")


def widen(x) -> np.ndarray:
    """A half-type array as float32 (exact)."""
    name = dtype_name(x.dtype)
    bits = np.asarray(x).view(np.uint16)
    return bf16_to_f32(bits) if name == "bfloat16" else f16_to_f32(bits)


# --------------------------------------------------------- reduce, scale, cast
def reduce(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """op(a, b) elementwise; half types in float32, rounded once; integers wrap."""
    f = _UFUNCS[op]
    if dtype_name(a.dtype) in HALF:
        return round_to(f(widen(a), widen(b)), a.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return f(a, b)


def scale(x: np.ndarray, divisor: int) -> np.ndarray:
    """x / divisor: integers truncate toward zero (C division), half types via float32."""
    name = dtype_name(x.dtype)
    if x.dtype.kind == "i":  # floor, then up by one where a negative had a remainder (abs(min) overflows)
        d = x.dtype.type(divisor)
        return (x // d + ((x % d != 0) & (x < 0))).astype(x.dtype)
    if name in HALF:
        return round_to(widen(x) / F32(divisor), x.dtype)
    return x / x.dtype.type(divisor)


def cast(src: np.ndarray, dst_dtype) -> np.ndarray:
    """float32 <-> bfloat16 / float16."""
    s, d = dtype_name(src.dtype), dtype_name(dst_dtype)
    if s == "float32" and d in HALF:
        return round_to(src, dst_dtype)
    if s in HALF and d == "float32":
        return widen(src)
    raise TypeError(f"no cast from {s} to {d}")


# ------------------------------------------------------------ optimizers
def adamw_scalars(*, lr, beta1, beta2, eps, weight_decay, step, grad_scale=1.0) -> dict:
    """The float32 constants of one AdamW step, computed in double as torch does."""
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    w1 = F32(1.0 - beta1)
    return dict(grad_scale=F32(grad_scale), decay=F32(1.0 - lr * weight_decay), w1=w1,
                one_minus_w1=F32(1.0) - w1, beta2=F32(beta2), c2=F32(1.0 - beta2),
                bc2_sqrt=F32(math.sqrt(bc2)), eps=F32(eps), neg_step=F32(-(lr / bc1)))


def adamw(param, grad, exp_avg, exp_avg_sq, *, lr, beta1, beta2, eps, weight_decay, step,
          grad_scale=1.0, lowp_dtype=None):
    """One AdamW step on float32 arrays; returns new (param, exp_avg, exp_avg_sq, lowp or None).

    The arithmetic is numpy_optim.adamw_step's (torch.optim.AdamW's CPU path,
    fused multiply-adds included), run on copies: one AdamW, not two."""
    p, m, v = (np.array(a, dtype=F32).reshape(-1) for a in (param, exp_avg, exp_avg_sq))
    numpy_optim.adamw_step(p, np.ascontiguousarray(grad, dtype=F32).reshape(-1), m, v, lr=lr, beta1=beta1,
                           beta2=beta2, eps=eps, weight_decay=weight_decay, step=step, grad_scale=grad_scale)
    low = None if lowp_dtype is None else round_to(p, lowp_dtype)
    return p, m, v, low


def sgd_scalars(*, lr, momentum, dampening, weight_decay, nesterov, first_step, grad_scale=1.0) -> dict:
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("nesterov needs momentum > 0 and dampening == 0 (as in torch.optim.SGD)")
    return dict(grad_scale=F32(grad_scale), wd=F32(weight_decay), momentum=F32(momentum),
                damp1=F32(1.0 - dampening), neg_lr=F32(-lr), has_wd=np.int32(weight_decay != 0),
                has_momentum=np.int32(momentum != 0), first_step=np.int32(bool(first_step)),
                nesterov=np.int32(bool(nesterov)))


def sgd(param, grad, momentum_buf, *, lr, momentum, dampening, weight_decay, nesterov, first_step,
        grad_scale=1.0, lowp_dtype=None):
    """One SGD step on float32 arrays; returns new (param, momentum_buf or None, lowp or None).

    The arithmetic is numpy_optim.sgd_step's (torch.optim.SGD's CPU path), run on copies."""
    sgd_scalars(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                nesterov=nesterov, first_step=first_step, grad_scale=grad_scale)  # same argument checks
    p = np.array(param, dtype=F32).reshape(-1)
    buf = None
    if momentum != 0:
        buf = np.zeros(p.size, F32) if momentum_buf is None else np.array(momentum_buf, dtype=F32).reshape(-1)
    numpy_optim.sgd_step(p, np.ascontiguousarray(grad, dtype=F32).reshape(-1), buf, lr=lr, momentum=momentum,
                         dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                         first_step=first_step, grad_scale=grad_scale)
    low = None if lowp_dtype is None else round_to(p, lowp_dtype)
    return p, buf, low
