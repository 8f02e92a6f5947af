"""The direct all-gather (a part of Direct, see direct.py).

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

from .allreduce import PUSH_CHUNK_BYTES, _flat
from .cma import CMA_WIN, Remote, cma_read
from .signals import DONE
from .stage import ranges_of as _ranges


# outs from this size are pushed when they can be: 1.16-1.37x the pull from 1 MiB, even
# (0.94-1.00x) at 4-512 KiB, in C both (paired, one launch, two ranks)
PUSH_MIN_BYTES = 1 << 20


class AllGather:
    """Direct's all-gather (a mixin: the state and helpers are Direct's)."""

    def all_gather(self, ctx, hdr, x, out, counts, xloc, ranges=None, oloc=None):
        """Every rank's x into out at its offset, or with ``ranges`` (per node rank, a
        tuple of (offset in out, count)) each rank's x split over those ranges.
        ``oloc``: where out is in the heap (None: private)."""
        dt = x.dtype
        dst = oloc if oloc is not None and ranges is None else (-1, -1)
        pipe = self.pipe_min is not None and ranges is None and self._piped("all_gather", out.nbytes, dt)
        base = self._start(ctx, hdr, x, xloc, max(counts) * dt.itemsize if ranges is None else
                           max(sum(c for _, c in r) for r in ranges) * dt.itemsize, dst, kind="all_gather",
                           cma=ranges is None and not pipe and not np.may_share_memory(x, out), pipe=pipe)
        if self.via_ring:
            if pipe:
                return self._by_pipe(ctx, base, "all_gather", x, out, counts, None)
            return self._by_ring(ctx, base, "all_gather", x, out, counts, None)
        if dst[0] >= 0:
            chunks = self._ag_push_plan(x.size, dt, tuple(counts))
            if chunks is not None:
                return self._ag_push(ctx, base, chunks, counts, dt)
        ckey = tuple(counts) if ranges is None else ranges
        wkey = ("ag", id(x), id(out), x.size, out.size, dt, ckey, self._key, xloc is None)
        work = self._work.get(wkey)
        if work is None or work[0] is not x or work[1] is not out:
            work = self._bind(wkey, x, out, self._ag_work(x, out, xloc, ckey, ranges or _ranges(counts)))
        peers, own = work[2]
        for dst, src in peers:
            if type(src) is Remote:
                cma_read(ctx, dst, src)
            else:
                np.copyto(dst, src)
        if ctx.tracer is not None:
            self._trace(ctx, "direct all-gather", [(q, q, sum(c for _, c in rq) * dt.itemsize)
                                                   for q, rq in enumerate(ranges or _ranges(counts))])
        # done reading peers: say so before our own piece's copy, which overlaps their reading
        self.sig.flag[0] = base + DONE
        for dst, src in own:
            np.copyto(dst, src)
        if xloc is not None or self.offered:  # peers read our x in place: wait until they are done
            self.sig.wait_all(ctx, base + DONE, "done reading")

    def _ag_push(self, ctx, base, chunks, counts, dt):
        """Our piece, chunk by chunk, into every rank's out (read from memory once,
        then from cache); done; every peer done means every piece is in ours."""
        for src, dsts in chunks:
            for d in dsts:
                np.copyto(d, src)
                src = d  # the next copy reads what is now in cache
        self._finish(ctx, base)
        if ctx.tracer is not None:  # what landed in our out: each peer's piece, written by its owner
            self._trace(ctx, "direct all-gather", [(q, q, c * dt.itemsize) for q, c in enumerate(counts)], pushed=True)

    def _ag_push_plan(self, count, dt, counts):
        """[(source chunk, [destination chunks])] for our piece when every rank's input
        and out are in the heap (from the posted locations: every rank decides
        alike), else None. Then the owner writes its piece into every out: memory
        sees each piece read once and each out written once (the roofline's
        traffic), where every rank reading every piece reads each n times."""
        key = ("agpush", count, dt, counts, self._key)
        plan = self._plans.get(key, False)
        if plan is False:
            plan = self._cached(key, lambda: self._ag_push_chunks(count, dt, counts))
        return plan

    def _ag_push_chunks(self, count, dt, counts):
        n, r, sig, total = self.size, self.rank, self.sig, sum(counts)
        if total * dt.itemsize < PUSH_MIN_BYTES or any(sig.loc(q, w)[0] < 0 for q in range(n) for w in (0, 1)):
            return None
        (o, c), = _ranges(counts)[r]
        src = self._src(r, count, dt)
        outs = [self.heap.peer_view(q, sig.loc(q, 1), total, dt)[o:o + c] for q in [r] + sig.others]
        if np.shares_memory(src, outs[0]):  # in place: our piece is in our out already
            src = outs.pop(0)
        step = max(1, PUSH_CHUNK_BYTES // dt.itemsize)
        return [(src[lo:lo + step], [d[lo:lo + step] for d in outs]) for lo in range(0, c, step)]

    def _ag_work(self, x, out, xloc, ckey, ranges):
        """([(destination view, source) per peer's piece], [the same for our own]) for
        these x and out; a source is a view, or a cma.Remote read in place."""
        dt, r = x.dtype, self.rank
        pieces = self._cached(("ag", dt, ckey, self._key), lambda: self._ag_plan(dt, ranges))
        of, xf, peers, own = _flat(out), _flat(x), [], []
        for sl, src, q, at in pieces:
            if q == r and xloc is None:  # staged or offered: our own piece straight from x
                src = xf[at:at + sl.stop - sl.start]
                if np.shares_memory(src, of):
                    continue  # in place: already there (x is our piece of out)
            (own if q == r else peers).append((of[sl], src))
        return peers, own

    def _ag_plan(self, dt, ranges):
        plan = []
        for q, rq in enumerate(ranges):
            loc, at = self.sig.loc(q, 0), 0
            src = None if loc[0] == CMA_WIN else self._src(q, sum(c for _, c in rq), dt)
            for o, c in rq:
                piece = Remote(self.pids[q], loc[1] + at * dt.itemsize, c * dt.itemsize, self.sig.world[q]) \
                    if src is None else src[at:at + c]
                plan.append((slice(o, o + c), piece, q, at))
                at += c
        return plan

