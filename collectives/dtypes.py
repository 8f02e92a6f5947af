"""The dtypes, reduction ops and collectives the library accepts, stated once.

Half types (float16, bfloat16) are reduced in float32 and rounded once per
step; everything else is reduced in its own type.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# name -> (numpy dtype, wire code). Codes travel in the header; never reorder.
DTYPES: dict[str, tuple[np.dtype, int]] = {
    "float16": (np.dtype(np.float16), 1),
    "bfloat16": (bfloat16, 2),
    "float32": (np.dtype(np.float32), 3),
    "float64": (np.dtype(np.float64), 4),
    "int32": (np.dtype(np.int32), 5),
    "int64": (np.dtype(np.int64), 6),
}
HALF = frozenset({"float16", "bfloat16"})
OPS: dict[str, int] = {"sum": 1, "prod": 2, "max": 3, "min": 4, "avg": 5}
# collective -> wire code (the header's collective field); never reorder
COLLECTIVES: tuple[str, ...] = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier")
COLLECTIVE_CODES = {name: code for code, name in enumerate(COLLECTIVES, start=1)}
DATA_COLLECTIVES = COLLECTIVES[:4]  # the collectives that move data (all but the barrier)


_BY_DTYPE = {npdt: name for name, (npdt, _) in DTYPES.items()}


def dtype_name(dtype) -> str:
    """Name of a supported dtype, or TypeError naming the supported ones."""
    name = _BY_DTYPE.get(dtype)  # the hot path: a numpy dtype object
    if name is None:
        try:
            name = _BY_DTYPE.get(np.dtype(dtype))
        except TypeError:
            name = None
        if name is None:
            raise TypeError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    return name


_CODES = {npdt: code for npdt, code in DTYPES.values()}


def dtype_code(dtype) -> int:
    """Wire code of a supported dtype (TypeError otherwise); a dict lookup on the hot path."""
    code = _CODES.get(dtype)
    return code if code is not None else DTYPES[dtype_name(dtype)][1]


_FLOATING = frozenset(npdt for name, (npdt, _) in DTYPES.items() if not name.startswith("int"))


def is_floating(dtype) -> bool:
    """True for the floating types (bfloat16 included, whose numpy kind is 'V')."""
    return dtype in _FLOATING or np.dtype(dtype) in _FLOATING


def to_dtype(name: str) -> np.dtype:
    try:
        return DTYPES[name][0]
    except KeyError:
        raise TypeError(f"unknown dtype {name!r}; supported: {', '.join(DTYPES)}") from None


def check_op(op: str) -> int:
    """Wire code of a reduction op, or ValueError naming the valid ones."""
    try:
        return OPS[op]
    except (KeyError, TypeError):
        raise ValueError(f"unknown op {op!r}; valid ops: {', '.join(OPS)}") from None


def accumulate_dtype(dtype) -> np.dtype:
    """The type a reduction computes in: float32 for half types."""
    return np.dtype(np.float32) if dtype_name(dtype) in HALF else np.dtype(dtype)
