"""The direct all-gather (a collaborator of Direct, direct.py).

Pull: every rank copies every peer's piece into ``out``: from the peer's heap
array, its stage copy, or, offered in place, its private input with
process_vm_readv (cma.py). Peers' pieces first, then DONE, then the own
piece's copy (so an owner waiting for its readers overlaps their last
copy), then, when peers read our input in place, the wait for their DONE.
Push (every rank's input and out in the heap): each rank writes its own
piece into every out, chunk by chunk from cache, then DONE and the wait.
"""
from __future__ import annotations

import numpy as np

from ..fast.codes import copy_out
from ..roads import Road
from .allreduce import flat
from .cma import Remote, cma_read, offers
from .signals import CMA_WIN, DONE, PRIVATE
from .stage import ranges_of


class AllGather:
    """Direct's all-gather.

    Args:
      d: the Direct whose heap, slots and steps it uses.
    """

    def __init__(self, d):
        self.d = d

    def run(self, ctx, hdr, x, out, counts, xloc, ranges=None, oloc=None):
        """Every rank's x into out at its offset, or with ``ranges`` (per node rank, a
        tuple of (offset in out, count): the hierarchy's) each rank's x split over
        those ranges. ``oloc``: where out is in the heap (None: private)."""
        d, dt = self.d, x.dtype
        hier = ranges is not None
        dst = oloc if oloc is not None and not hier else (PRIVATE, PRIVATE)
        piece = (max(counts) if not hier else max(sum(c for _, c in r) for r in ranges)) * dt.itemsize
        staged_road = None if hier else d.if_staged("all_gather", out.nbytes, piece, dt)
        leaves = staged_road in (Road.PIPE, Road.STAGED_RING)
        offer = not hier and offers(d, "all_gather", x, out, xloc, piece)  # read in place (cma.py)
        base = d.start(ctx, hdr, x, xloc, piece, dst, leaves=leaves, offer=offer)
        if hier:
            d.road = Road.DIRECT
        else:
            road = d.choose("all_gather", out.nbytes, piece, dt, None, lambda: self.all_heap())
            if road is Road.PIPE or road is Road.STAGED_RING:
                return d.leave(ctx, base, "all_gather", x, out, counts, None)
            if road is Road.PUSH:
                chunks = d.cached(("agpush", x.size, dt, tuple(counts), d.key),
                                  lambda: self.push_plan(x.size, dt, counts))
                return self.push(ctx, base, chunks, counts, dt)
        ckey = tuple(counts) if ranges is None else ranges
        wkey = ("ag", id(x), id(out), x.size, out.size, dt, ckey, d.key, xloc is None)
        peers, own = d.bind(wkey, x, out, lambda: self.work(x, out, xloc, ckey, ranges or ranges_of(counts)))
        for to, src in peers:
            if type(src) is Remote:
                cma_read(ctx, to, src)
            else:
                copy_out(to, src, d.tuning.stream_min_bytes)
        if ctx.tracer is not None:
            d.trace(ctx, "direct all-gather", [(q, q, sum(c for _, c in rq) * dt.itemsize)
                                               for q, rq in enumerate(ranges or ranges_of(counts))])
        # done reading peers: say so before our own piece's copy, which overlaps their reading
        d.sig.flag[0] = base + DONE
        for to, src in own:
            copy_out(to, src, d.tuning.stream_min_bytes)
        if xloc is not None or d.offered:  # peers read our x in place: wait until they are done
            d.sig.wait_all(ctx, base + DONE, "done reading")

    def all_heap(self) -> bool:
        """Every rank's input and out in the heap (from the posted locations)."""
        sig = self.d.sig
        return all(sig.loc(q, w)[0] >= 0 for q in range(self.d.size) for w in (0, 1))

    def push(self, ctx, base, chunks, counts, dt):
        """Our piece, chunk by chunk, into every rank's out (read from memory once,
        then from cache); done; every peer done means every piece is in ours."""
        for src, dsts in chunks:
            for to in dsts:
                np.copyto(to, src)
                src = to  # the next copy reads what is now in cache
        self.d.finish(ctx, base)
        if ctx.tracer is not None:  # what landed in our out: each peer's piece, written by its owner
            self.d.trace(ctx, "direct all-gather", [(q, q, c * dt.itemsize) for q, c in enumerate(counts)],
                         pushed=True)

    def push_plan(self, count, dt, counts):
        """[(source chunk, [destination chunks])] for our piece, when every rank's input
        and out are in the heap. The owner writes its piece into every out: memory
        sees each piece read once and each out written once, where every rank
        reading every piece reads each n times."""
        d = self.d
        r, sig, total = d.rank, d.sig, sum(counts)
        (o, c), = ranges_of(counts)[r]
        src = d.src(r, count, dt)
        outs = [d.heap.peer_view(q, sig.loc(q, 1), total, dt)[o:o + c] for q in [r] + sig.others]
        if np.shares_memory(src, outs[0]):  # in place: our piece is in our out already
            src = outs.pop(0)
        step = max(1, d.tuning.push_chunk_bytes // dt.itemsize)
        return [(src[lo:lo + step], [t[lo:lo + step] for t in outs]) for lo in range(0, c, step)]

    def work(self, x, out, xloc, ckey, ranges):
        """([(destination view, source) per peer's piece], [the same for our own]) for
        these x and out; a source is a view, or a cma.Remote read in place."""
        d, dt, r = self.d, x.dtype, self.d.rank
        pieces = d.cached(("ag", dt, ckey, d.key), lambda: self.plan(dt, ranges))
        of, xf, peers, own = flat(out), flat(x), [], []
        for sl, src, q, at in pieces:
            if q == r and xloc is None:  # staged or offered: our own piece straight from x
                src = xf[at:at + sl.stop - sl.start]
                if np.shares_memory(src, of):
                    continue  # in place: already there (x is our piece of out)
            (own if q == r else peers).append((of[sl], src))
        return peers, own

    def plan(self, dt, ranges):
        d, plan = self.d, []
        for q, rq in enumerate(ranges):
            loc, at = d.sig.loc(q, 0), 0
            src = None if loc[0] == CMA_WIN else d.src(q, sum(c for _, c in rq), dt)
            for o, c in rq:
                piece = Remote(d.pids[q], loc[1] + at * dt.itemsize, c * dt.itemsize, d.sig.world[q]) \
                    if src is None else src[at:at + c]
                plan.append((slice(o, o + c), piece, q, at))
                at += c
        return plan
