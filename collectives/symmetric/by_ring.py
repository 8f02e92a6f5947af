"""Large staged calls go by the ring over MPI point-to-point (collectives/ring.py).

A staged input (an ordinary host array copied into the stage window) costs one
copy more than the ring's single-copy transfers; from about a megabyte that copy
costs more than the direct reads save, so past ``stage_max[kind]`` the direct
path checks the headers in shared memory and hands the data to the ring
(only on one node: node ranks are world ranks there).
"""
from __future__ import annotations

import numpy as np

from .. import ring
from ..kernels import NUMPY_KERNELS
from ..schedule import split_counts
from .allreduce import _flat
from .signals import DONE


def by_ring(self, ctx, base, kind, x, out, counts, op):
    """A large staged call: the ring over MPI point-to-point (collectives/ring.py)
    once the headers agree here (its own agreement is skipped). Staging copies
    every input once more than the ring's single-copy transfers move, which
    from about a megabyte costs more than the direct reads save. ``counts`` is
    the root for a broadcast."""
    xf = _flat(x)
    of = xf if out is x else _flat(out)
    f = "sum" if op == "avg" else op
    if kind == "all_reduce":
        ring.all_reduce(ctx, xf, of, split_counts(xf.size, self.size, max(1, 64 // xf.itemsize)), f)
    elif kind == "reduce_scatter":
        if np.shares_memory(xf, of):  # the ring's reduce-scatter may not write into its input
            xf = xf.copy()
        ring.reduce_scatter(ctx, xf, of, list(counts), f)
    elif kind == "broadcast":
        if ctx.rank == counts and of is not xf:
            np.copyto(of, xf)
        ring.broadcast(ctx, of, counts)
    else:
        ring.all_gather(ctx, xf, of, list(counts))
    if op == "avg":
        NUMPY_KERNELS.scale(of, self.size)
    self.sig.raise_to(base + DONE)

