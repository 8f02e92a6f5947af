"""The staged-ring road: a staged call past its stage limit goes over point-to-point
messages (host/run.py: the pair on two ranks, else the ring) once its headers
agree in shared memory (only on one node: node ranks are world ranks there).

A staged input (an ordinary host array copied into the stage window) costs one
copy more than the ring's single-copy transfers; from about a megabyte that copy
costs more than the direct reads save (tuning: stage_max_*).
"""
from __future__ import annotations

import numpy as np

from .. import roads
from ..host import run
from ..host.schedule import split_counts
from ..kernels import NUMPY_KERNELS
from .allreduce import flat
from .signals import DONE


def by_ring(d, ctx, base, kind, x, out, counts, op):
    """Direct ``d``'s call over point-to-point messages, the headers already agreed (the
    ring's own agreement is skipped). ``counts`` is the root for a broadcast."""
    xf = flat(x)
    of = xf if out is x else flat(out)
    f = "sum" if op == "avg" else op
    n = d.size
    if kind == "all_reduce":
        counts = split_counts(xf.size, n, max(1, 64 // xf.itemsize))
        piece = max(counts) * xf.itemsize
    elif kind == "reduce_scatter":
        if np.shares_memory(xf, of):  # the ring's reduce-scatter may not write into its input
            xf = xf.copy()
        counts = list(counts)
        piece = max(counts) * xf.itemsize
    elif kind == "broadcast":
        if ctx.rank == counts and of is not xf:
            np.copyto(of, xf)
        piece = of.nbytes
    else:
        counts = list(counts)
        piece = max(counts) * xf.itemsize
    in_place = run.in_place_memory(xf, of) if kind == "all_reduce" else kind == "all_gather" and np.shares_memory(xf, of)
    road = roads.point_to_point(roads.Facts(kind, of.nbytes, piece, xf.dtype, f, world=n, in_place=in_place), d.tuning)
    run.run(ctx, road, kind, xf, of, counts, f, in_place, d.tuning.pair_inplace_bytes)
    if op == "avg":
        NUMPY_KERNELS.scale(of, n)
    d.sig.raise_to(base + DONE)
