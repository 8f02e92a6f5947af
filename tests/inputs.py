"""Test inputs whose reductions are exact in any order (small integers), shared by
the simulated-rank tests and the mpirun scripts."""
import numpy as np


def data(count: int, rank: int, dtype, op: str = "sum") -> np.ndarray:
    """Rank ``rank``'s input: values in [-8, 8]; for prod, values in {1, 2, -1}."""
    i = np.arange(count, dtype=np.int64)
    if op == "prod":
        v = np.where((i + rank) % 5 == 0, 2, np.where((i + rank) % 7 == 0, -1, 1))
    else:
        v = ((i * 7 + rank * 13 + 3) % 17) - 8
    return v.astype(dtype)
