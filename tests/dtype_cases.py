"""Inputs and exact numpy answers for every dtype and op of the dtype table.

Shared by the simulated-rank tests (tests/test_dtypes.py) and the mpirun
scripts (tests/mpi/dtype_check.py, tests/mpi/torch_dtypes.py). Each rank's
input comes from an integer formula, so every rank can rebuild every other
rank's input and compute the answer with numpy alone:

- integers: sums and products wrap as C's do (numpy's casts of the int64
  answer wrap the same way); max, min and the bitwise ops use the type's
  whole range; avg (sum, then divide truncating toward zero) on small values;
- bool: sum and max are or, prod and min are and, bxor is parity;
- complex: integer real and imaginary parts (exact in any order); avg's
  inputs are n times the data, so the quotient is exact;
- floating types: small integers, as tests/inputs.py has them;
- float8: values that round-trip, for the collectives that only move.
"""
from __future__ import annotations

import numpy as np

from collectives.dtypes import DTYPES, OPS, TABLE

ROWS = {row.name: row for row in TABLE}
NEW = ("bool", "uint8", "int8", "int16", "uint16", "uint32", "uint64", "complex64", "complex128",
       "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
_F8_VALUES = np.array([0.5, 1, 2, 4, 8, 0.25, 16, 1.5], np.float32)  # exact in every float8 type


def ops_of(name: str) -> list[str]:
    """The table's ops for a dtype, in OPS order."""
    return [op for op in OPS if op in DTYPES[name].ops]


def bad_ops_of(name: str) -> list[str]:
    return [op for op in OPS if op not in DTYPES[name].ops]


def data(name: str, count: int, rank: int, op: str = "sum", n: int = 1) -> np.ndarray:
    """Rank ``rank``'s input of ``count`` elements for ``op`` (``n``: the world size)."""
    row = DTYPES[name]
    i = np.arange(count, dtype=np.int64)
    if row.kind == "float8":
        return _F8_VALUES[(i + 3 * rank) % len(_F8_VALUES)].astype(row.numpy)
    if row.kind == "bool":
        return ((i * 7 + rank * 3) % 5 < 3) if op != "prod" else ((i + rank) % 11 != 0)
    if op == "prod":
        v = np.where((i + rank) % 5 == 0, 2, np.where((i + rank) % 7 == 0, 3, 1))
        if row.kind in ("int", "float", "half"):
            v = np.where((i * 3 + rank) % 4 == 0, -v, v)
        return v.astype(row.numpy)
    if row.kind in ("int", "uint") and op in ("max", "min", "band", "bor", "bxor", "sum"):
        bits = row.numpy.itemsize * 8
        u = (i * 2654435761 + rank * 40503 + 12345) % (1 << min(bits, 62))
        if bits == 64:
            u = u * 5 + 1  # reach the top bits too: int64 arithmetic wraps, the cast keeps them
        return u.astype(np.uint64).astype(row.numpy)  # wraps into the type's range (negatives for signed)
    v = ((i * 7 + rank * 13 + 3) % 17) - 8
    if row.kind == "uint":
        v = v + 8
    if row.kind == "complex":
        v = v + 1j * (((i * 5 + rank * 3) % 11) - 5)
    if op == "avg" and row.kind in ("float", "half", "complex"):
        v = v * n
    return v.astype(row.numpy)


def expected(name: str, count: int, op: str, n: int) -> np.ndarray:
    """The exact all-reduce of every rank's ``data`` (n ranks)."""
    row = DTYPES[name]
    xs = [data(name, count, r, op, n) for r in range(n)]
    if row.kind == "bool":
        f = {"sum": np.logical_or, "max": np.logical_or, "bor": np.logical_or, "prod": np.logical_and,
             "min": np.logical_and, "band": np.logical_and, "bxor": np.logical_xor}[op]
        return f.reduce(np.stack(xs), axis=0) if count else np.zeros(0, bool)
    if row.kind in ("int", "uint"):
        wide = [x.astype(np.int64) if row.kind == "int" else x.astype(np.uint64) for x in xs]
        if op in ("sum", "avg", "prod"):
            acc = wide[0].copy()
            for x in wide[1:]:
                acc = acc + x if op != "prod" else acc * x  # 64-bit wrap-around, then the cast
            got = acc.astype(row.numpy)
            if op == "avg":
                got = np.trunc(got.astype(np.float64) / n).astype(row.numpy)
            return got
        f = {"max": np.maximum, "min": np.minimum, "band": np.bitwise_and, "bor": np.bitwise_or,
             "bxor": np.bitwise_xor}[op]
        return f.reduce(np.stack(xs), axis=0).astype(row.numpy) if count else np.zeros(0, row.numpy)
    if row.kind == "complex":
        total = np.sum(np.stack(xs).astype(np.complex128), axis=0) if count else np.zeros(0)
        return (total / n if op == "avg" else total).astype(row.numpy)
    wide = np.stack([x.astype(np.float64) for x in xs]) if count else np.zeros((n, 0))
    e = {"sum": wide.sum(0), "avg": wide.sum(0) / n, "prod": wide.prod(0), "max": wide.max(0, initial=-1e9),
         "min": wide.min(0, initial=1e9)}[op]
    return e.astype(row.numpy)


def same(got, want) -> bool:
    """Bit for bit (bool by truth value: Gloo leaves the byte sums of bools)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype == np.bool_:
        return np.array_equal(got.view(np.uint8) != 0, want.view(np.uint8) != 0)
    return got.tobytes() == want.tobytes()
