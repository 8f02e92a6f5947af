"""numpy references of collectives' CUDA kernels (reduce, scale), written op by op like them.

These are what the GPU tests compare each CUDA kernel with, and what the
CPU tests check against independent formulas (torch, ml_dtypes). The half
type roundings are done here on bit patterns, not through ml_dtypes, so the
check against ml_dtypes and torch means something. The references of the
optimizer steps and casts (sharding/kernels/optim.cu, the casts of csrc/cast.cu) are
sharding/optim_ref.py's.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import HALF, bfloat16, dtype_name

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


# ---------------------------------------------------------------- reduce, scale
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
