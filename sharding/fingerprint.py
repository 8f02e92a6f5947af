"""The model fingerprint: every rank checks, with one small collective, that
all ranks built their ZeroOptimizer from the same model; where they did not,
they exchange the descriptions and every rank names the first difference."""
from __future__ import annotations

import hashlib
import json

import numpy as np


def check_same_model(comm, units, stage, param_dtype, reduce_dtype, symmetric: bool = False) -> None:
    """Raise ValueError on every rank unless every rank passed the same units,
    parameter names and shapes, stage and dtypes (collective: every rank calls it).

    Collectives check sizes, not shapes: a (6, 20) weight on one rank and
    (20, 6) on another would shard and train, each rank reading the other's
    numbers in another order.

    Args:
      comm: the Communicator.
      units: ``{unit: {name: array}}`` as this rank passed them.
      stage, param_dtype, reduce_dtype: the ZeroOptimizer's settings.
      symmetric: whether this rank's buffers go to the symmetric heap (heap.py):
        allocating there is a collective call without a deadline, so ranks that
        disagree must raise here rather than hang in it.
    """
    model = {"units": [[u, [[n, list(np.shape(a))] for n, a in params.items()]] for u, params in units.items()],
             "stage": stage, "param_dtype": str(param_dtype), "reduce_dtype": str(reduce_dtype),
             "symmetric": bool(symmetric)}
    text = json.dumps(model)
    fp = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "little")
    hi, neg_lo = comm.all_reduce(np.array([fp, -fp], np.int64), op="max")  # one small collective
    if hi == fp and -neg_lo == fp:
        return
    # someone differs: every rank knows, so every rank gathers the descriptions and says where
    data = text.encode()
    words = np.frombuffer(data.ljust(-(-len(data) // 8) * 8), np.int64)  # collectives move int64, not bytes
    sizes = [int(k) for k in comm.all_gather(np.array([words.size], np.int64))]
    blob = comm.all_gather(words, counts=sizes)
    offs = np.concatenate([[0], np.cumsum(sizes)])
    models = [json.loads(blob[offs[q]:offs[q + 1]].tobytes().rstrip(b" ")) for q in range(comm.size)]
    raise ValueError(f"rank {comm.rank}: ZeroOptimizer: ranks passed different models: "
                     + _first_difference(models))


def _first_difference(models) -> str:
    """Name the first place where the ranks' model descriptions differ."""
    def per_rank(values):
        return "; ".join(f"rank {q}: {v}" for q, v in enumerate(values))
    for key in ("stage", "param_dtype", "reduce_dtype", "symmetric"):
        values = [m.get(key) for m in models]
        if len(set(values)) > 1:
            return f"{key} differs ({per_rank(values)})"
    names = [[u for u, _ in m["units"]] for m in models]
    if any(n != names[0] for n in names):
        return f"unit names differ ({per_rank(names)})"
    for i, unit in enumerate(names[0]):
        params = [", ".join(f"{n} {tuple(shape)}" for n, shape in m["units"][i][1]) for m in models]
        if len(set(params)) > 1:
            return f"unit {unit!r} differs ({per_rank(params)})"
    return "the descriptions differ"  # only a hash collision would leave nothing to name
