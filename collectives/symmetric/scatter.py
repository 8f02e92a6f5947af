"""The direct reduce-scatter (a collaborator of Direct, direct.py): each rank
reduces its own segment, reading every peer's source segment in cache-sized
chunks (the partial result stays in cache while the next peer's chunk streams
in), straight into ``out``. With ``ranges`` (the hierarchy's), a rank's share
is several ranges of x, concatenated."""
from __future__ import annotations

import numpy as np

from ..roads import Road
from . import stage
from .allreduce import flat


class ReduceScatter:
    """Direct's reduce-scatter.

    Args:
      d: the Direct whose heap, slots and steps it uses.
    """

    def __init__(self, d):
        self.d = d

    def run(self, ctx, hdr, x, out, counts, op, xloc, ranges=None):
        """Node rank r gets segment r, or with ``ranges`` (per node rank, a tuple of
        (offset, count) in x) those ranges, concatenated."""
        d, dt = self.d, x.dtype
        ckey = tuple(counts) if ranges is None else ranges
        parts = stage.rs_parts(d, x, out, xloc, counts, ranges, ckey)  # staged: only what peers read
        hier = ranges is not None
        leaves = not hier and d.leaves("reduce_scatter", x.nbytes, x.nbytes, dt, op)
        base = d.start(ctx, hdr, x, xloc, x.nbytes, leaves=leaves, parts=parts)
        if hier:
            d.road = Road.DIRECT
        elif d.choose("reduce_scatter", x.nbytes, x.nbytes, dt, op) is not Road.DIRECT:
            return d.leave(ctx, base, "reduce_scatter", x, out, counts, op)
        wkey = ("rs", id(x), id(out), x.size, out.size, dt, ckey, d.key, xloc is None)
        work = d.bind(wkey, x, out, lambda: self.work(x, out, xloc, ckey, ranges or stage.ranges_of(counts)))
        for dst, srcs in work:
            d.reduce(op, dst, srcs)
        if ctx.tracer is not None:
            n = sum(srcs[0].nbytes for _, srcs in work)
            d.trace(ctx, "direct reduce-scatter", [(q, d.rank, n) for q in range(d.size)])
        d.finish(ctx, base, xloc)

    def work(self, x, out, xloc, ckey, ranges):
        """(destination view, source views) per range, for these x and out."""
        d, dt, r = self.d, x.dtype, self.d.rank
        plan = d.cached(("rs", x.size, dt, ckey, d.key), lambda: self.plan(x.size, dt, ranges))
        xf, of, work = flat(x), flat(out), []
        for sl, srcs, o, c in plan:
            dst = of[sl]
            if xloc is None:  # staged: our own input read in place (the stage copy is the peers')
                own = xf[o:o + c]
                if d.size == 2 or not np.shares_memory(own, dst):
                    srcs = srcs[:]
                    srcs[r] = own
            work.append((dst, srcs))
        return work

    def plan(self, count, dt, ranges):
        d = self.d
        views = [d.src(q, count, dt) for q in range(d.size)]
        plan, at = [], 0
        for o, c in ranges[d.rank]:
            plan.append((slice(at, at + c), [v[o:o + c] for v in views], o, c))
            at += c
        return plan
