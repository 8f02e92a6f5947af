"""The dtypes, reduction ops and collectives the library accepts: the one table.

Every other map derives from ``TABLE``: the header's wire codes and names
(safety/header.py), torch's dtypes (arrays.py, the torch backend), MPI's
datatypes (baselines/mpi.py), NCCL's (baselines/nccl.py), the CUDA kernel
suffixes (kernels/launch.py) and which ops a dtype reduces with. What the C
extension reduces it says itself (fast/codes.py); anything else runs in
Python.

Half types (float16, bfloat16) are reduced in float32 and rounded once per
step; everything else is reduced in its own type. bool reduces as logic
(sum and max are or, prod and min are and), the integers wrap as C's do,
complex types sum and average; the float8 types only move (all-gather,
broadcast). A dtype and op that do not go together are refused before a
byte moves, with a TypeError naming both.
"""
from __future__ import annotations

from typing import NamedTuple

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# op -> wire code (the header's op field); never reorder
OPS: dict[str, int] = {"sum": 1, "prod": 2, "max": 3, "min": 4, "avg": 5, "band": 6, "bor": 7, "bxor": 8}
BITWISE = frozenset({"band", "bor", "bxor"})
_FLOAT_OPS = frozenset({"sum", "prod", "max", "min", "avg"})
_INT_OPS = _FLOAT_OPS | BITWISE
_BOOL_OPS = _INT_OPS - {"avg"}
_COMPLEX_OPS = frozenset({"sum", "avg"})
_MOVE_ONLY = frozenset()


class DType(NamedTuple):
    """One dtype: its numpy type and wire code, and what each library calls it.

    Attributes:
      numpy: the numpy dtype the algorithms work on (ml_dtypes for bfloat16 and float8).
      code: the header's wire code; never reused or reordered.
      kind: "float", "half", "int", "uint", "bool", "complex" or "float8".
      torch: its name in torch (``torch.<name>``).
      mpi: the mpi4py datatype MPI reduces it as (``MPI.<name>``); None: MPI moves it as bytes.
      nccl: the cupy.cuda.nccl constant; None: NCCL has no such type.
      kernel: the CUDA kernels' suffix (csrc/reduce.cu, cast.cu); None: no device kernels.
      ops: the reduction ops it takes; empty: all-gather and broadcast only.
      name: the library's name for it.
    """

    numpy: np.dtype
    code: int
    kind: str
    torch: str
    mpi: str | None
    nccl: str | None
    kernel: str | None
    ops: frozenset
    name: str = ""


def _row(name, numpy, code, kind, mpi, nccl, kernel, ops) -> DType:
    return DType(np.dtype(numpy), code, kind, name, mpi, nccl, kernel, ops, name)


# The table. Codes travel in the header: never reorder, never reuse.
TABLE: tuple[DType, ...] = (
    _row("float16", np.float16, 1, "half", None, "NCCL_FLOAT16", "f16", _FLOAT_OPS),
    _row("bfloat16", bfloat16, 2, "half", None, "NCCL_BFLOAT16", "bf16", _FLOAT_OPS),
    _row("float32", np.float32, 3, "float", "FLOAT", "NCCL_FLOAT32", "f32", _FLOAT_OPS),
    _row("float64", np.float64, 4, "float", "DOUBLE", "NCCL_FLOAT64", "f64", _FLOAT_OPS),
    _row("int32", np.int32, 5, "int", "INT32_T", "NCCL_INT32", "i32", _INT_OPS),
    _row("int64", np.int64, 6, "int", "INT64_T", "NCCL_INT64", "i64", _INT_OPS),
    _row("bool", np.bool_, 7, "bool", "C_BOOL", "NCCL_UINT8", None, _BOOL_OPS),
    _row("uint8", np.uint8, 8, "uint", "UINT8_T", "NCCL_UINT8", None, _INT_OPS),
    _row("int8", np.int8, 9, "int", "INT8_T", "NCCL_INT8", None, _INT_OPS),
    _row("int16", np.int16, 10, "int", "INT16_T", None, None, _INT_OPS),
    _row("uint16", np.uint16, 11, "uint", "UINT16_T", None, None, _INT_OPS),
    _row("uint32", np.uint32, 12, "uint", "UINT32_T", "NCCL_UINT32", None, _INT_OPS),
    _row("uint64", np.uint64, 13, "uint", "UINT64_T", "NCCL_UINT64", None, _INT_OPS),
    _row("complex64", np.complex64, 14, "complex", "C_FLOAT_COMPLEX", None, None, _COMPLEX_OPS),
    _row("complex128", np.complex128, 15, "complex", "C_DOUBLE_COMPLEX", None, None, _COMPLEX_OPS),
    _row("float8_e4m3fn", ml_dtypes.float8_e4m3fn, 16, "float8", None, None, None, _MOVE_ONLY),
    _row("float8_e5m2", ml_dtypes.float8_e5m2, 17, "float8", None, None, None, _MOVE_ONLY),
    _row("float8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz, 18, "float8", None, None, None, _MOVE_ONLY),
    _row("float8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz, 19, "float8", None, None, None, _MOVE_ONLY),
    _row("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu, 20, "float8", None, None, None, _MOVE_ONLY),
)
DTYPES: dict[str, DType] = {row.name: row for row in TABLE}
HALF = frozenset(row.name for row in TABLE if row.kind == "half")
KERNEL_DTYPES = tuple(row.name for row in TABLE if row.kernel is not None)  # what the CUDA kernels cover
KERNEL_OPS = _FLOAT_OPS  # and the ops they reduce with (avg: sum, then scale)
# collective -> wire code (the header's collective field); never reorder
COLLECTIVES: tuple[str, ...] = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier")
COLLECTIVE_CODES = {name: code for code, name in enumerate(COLLECTIVES, start=1)}
DATA_COLLECTIVES = COLLECTIVES[:4]  # the collectives that move data (all but the barrier)

_BY_DTYPE = {row.numpy: row for row in TABLE}
_CODES = {row.numpy: row.code for row in TABLE}
_FLOATING = frozenset(row.numpy for row in TABLE if row.kind in ("float", "half", "complex"))
_SUPPORTED = ", ".join(DTYPES)


def info(dtype) -> DType:
    """The table's row of a supported dtype (numpy dtype, name or type), or TypeError
    naming the supported ones."""
    row = _BY_DTYPE.get(dtype)  # the hot path: a numpy dtype object
    if row is None:
        row = DTYPES.get(dtype) if isinstance(dtype, str) else None
        if row is None:
            try:
                row = _BY_DTYPE.get(np.dtype(dtype))
            except TypeError:
                row = None
        if row is None:
            raise TypeError(f"unsupported dtype {dtype}; supported: {_SUPPORTED}")
    return row


def dtype_name(dtype) -> str:
    """Name of a supported dtype, or TypeError naming the supported ones."""
    return info(dtype).name


def dtype_code(dtype) -> int:
    """Wire code of a supported dtype (TypeError otherwise); a dict lookup on the hot path."""
    code = _CODES.get(dtype)
    return code if code is not None else info(dtype).code


def is_floating(dtype) -> bool:
    """True for the types avg divides before it sums: floating (bfloat16 included,
    whose numpy kind is 'V') and complex."""
    return dtype in _FLOATING or np.dtype(dtype) in _FLOATING


def to_dtype(name: str) -> np.dtype:
    try:
        return DTYPES[name].numpy
    except KeyError:
        raise TypeError(f"unknown dtype {name!r}; supported: {_SUPPORTED}") from None


def check_op(op: str) -> int:
    """Wire code of a reduction op, or ValueError naming the valid ones."""
    try:
        return OPS[op]
    except (KeyError, TypeError):
        raise ValueError(f"unknown op {op!r}; valid ops: {', '.join(OPS)}") from None


def check_reduction(dtype, op: str, what: str, rank: int | None = None, device: bool = False) -> int:
    """Wire code of ``op`` when ``dtype`` reduces with it. ValueError for an unknown op;
    TypeError naming the rank, the collective, the dtype, the op and what would do.

    Args:
      dtype: the arrays' dtype.
      op: the reduction op's name.
      what: the collective, for the message.
      rank: the caller's rank, for the message.
      device: device arrays, which reduce only with the CUDA kernels' ops (and NCCL's).
    """
    code = check_op(op)
    row = info(dtype)
    if op not in row.ops or (device and op not in KERNEL_OPS):
        what = what if rank is None else f"rank {rank}: {what}"
        if op in row.ops:
            raise TypeError(f"{what}: op {op!r} has no CUDA kernel (device arrays reduce with "
                            f"{', '.join(sorted(KERNEL_OPS))}); pass host arrays of {row.name}")
        if not row.ops:
            fix = f"{row.name} only moves (all_gather, broadcast); cast it to reduce it"
        else:
            fix = f"{row.name} reduces with {', '.join(o for o in OPS if o in row.ops)}"
        raise TypeError(f"{what}: op {op!r} does not apply to dtype {row.name}; {fix}")
    return code


def accumulate_dtype(dtype) -> np.dtype:
    """The type a reduction computes in: float32 for half types."""
    return np.dtype(np.float32) if dtype_name(dtype) in HALF else np.dtype(dtype)


def torch_dtypes(torch) -> dict:
    """{torch dtype: row} for every row this torch has (``torch`` is the module: this
    file never imports it)."""
    return {getattr(torch, row.torch): row for row in TABLE if hasattr(torch, row.torch)}


# The types numpy knows only through ml_dtypes (bfloat16, float8), which torch's numpy()
# and from_numpy() refuse: they cross between the two as an integer type of their size.
ML_DTYPES = frozenset(row.numpy for row in TABLE if row.numpy.type.__module__.startswith("ml_dtypes"))
_INT_VIEW = {1: (np.dtype(np.uint8), "uint8"), 2: (np.dtype(np.int16), "int16")}  # (numpy, torch's name)


def as_int(torch, t, dt: np.dtype):
    """Tensor ``t`` of ml_dtypes type ``dt`` viewed as the integer type torch and numpy share."""
    return t.view(getattr(torch, _INT_VIEW[dt.itemsize][1]))


def carrier(dt: np.dtype) -> np.dtype:
    """The numpy dtype that carries ``dt`` into ``torch.from_numpy``: itself, or for the
    ml_dtypes types the integer of their size."""
    return _INT_VIEW[dt.itemsize][0] if dt in ML_DTYPES else dt


def numpy_to_torch(torch, a: np.ndarray, dtype):
    """A torch tensor of torch dtype ``dtype`` over numpy array ``a``'s memory (zero-copy);
    ml_dtypes types (bfloat16, float8) through the integer view."""
    if a.dtype not in ML_DTYPES:
        return torch.from_numpy(a)
    return torch.from_numpy(a.view(carrier(a.dtype))).view(dtype)
