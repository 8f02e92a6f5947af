"""The direct all-reduce (a part of Direct, see direct.py).

Two phases: each rank reduces its segment into its destination (``out`` when
that is in the heap, else symmetric scratch, or its stage window when its
input is staged), raises its flag, and copies each peer's reduced segment as
soon as that peer's flag says it is there. One phase: every rank reduces the
whole vector, in rank order, so every rank computes the same bits; that is
how all-reduces up to ``SMALL_BYTES`` run, and on two ranks staged ones and
heap ones up to ``ONE_PHASE_2_BYTES`` not reduced in place.
"""
from __future__ import annotations

import numpy as np

from ..schedule import offsets, split_counts
from .signals import REDUCED

SMALL_BYTES = 32 * 1024  # all-reduces this small: one phase (every rank reduces all of it)
# two ranks: one phase up to this size for heap inputs not reduced in place (always
# for staged ones, which then skip both the second phase and the final wait). Each
# rank then reads the peer's clean input instead of the segment the peer has just
# written, and waits once less: 1.4-1.7x faster at 64 KiB-1 MiB, 1.2-2x at 4 MiB,
# even at 16 MiB, behind at 64 MiB (paired, one launch, loaded machine)
ONE_PHASE_2_BYTES = 16 << 20
STAGE_DST = -3  # a posted destination window: "my stage window"


def _flat(a):
    return a if a.ndim == 1 else a.reshape(-1)


class AllReduce:
    """Direct's all-reduce (a mixin: the state and helpers are Direct's)."""

    def all_reduce(self, ctx, hdr, x, out, op, xloc, oloc):
        sig, n, dt, count = self.sig, self.size, x.dtype, x.size
        # destination: out when in the heap; else our stage window when x is staged
        # (our own copy: reduce there in place, STAGE_DST); else symmetric scratch
        dst = oloc if oloc is not None else (STAGE_DST, 0) if xloc is None else (-1, -1)
        base = self._start(ctx, hdr, x, xloc, x.nbytes, dst)
        if self.via_ring:
            return self._by_ring(ctx, base, "all_reduce", x, out, None, op)
        if x.nbytes <= SMALL_BYTES or (n == 2 and (self.staged or (
                x.nbytes <= ONE_PHASE_2_BYTES and not self._in_place(x.nbytes)))):
            return self._ar_one_phase(ctx, base, x, out, op, xloc, oloc)
        locs = self._key
        scratch = self._need_scratch.get(locs)
        if scratch is None:
            if len(self._need_scratch) > 256:
                self._need_scratch.clear()
            scratch = self._need_scratch[locs] = any(w == -1 for w, _ in self._locs(1))
        if scratch:  # some rank's out is private: segments are reduced into symmetric scratch
            scratch = self.heap.scratch(x.nbytes)
        key = ("ar", count, dt, locs, scratch.index if scratch else -1, id(out) if oloc is None else 0)
        srcs, mine, gathers, _ = self._cached(key, lambda: self._ar_plan(out, count, dt, self._locs(1), scratch))
        self._reduce(op, mine, srcs)
        if ctx.tracer is not None:
            self._trace(ctx, "direct reduce-scatter", [(q, self.rank, mine.nbytes) for q in range(n)])
        sig.flag[0] = base + REDUCED
        flags = sig.flags
        for q, dst, src in gathers:
            if flags[q][0] < base + REDUCED:
                sig.wait(ctx, q, base + REDUCED, "segment reduced")
            np.copyto(dst, src)
        if ctx.tracer is not None:
            self._trace(ctx, "direct all-gather", [(q, q, src.nbytes) for q, _, src in gathers])
        self._finish(ctx, base, None if xloc is None and oloc is None else 0)  # peers read our out when in the heap

    def _in_place(self, nbytes):
        """Whether some rank's destination overlaps its heap source this call (from
        the posted locations, so every rank decides alike): one phase would then
        reduce aside and copy, which costs more than the second phase."""
        key = ("inplace", nbytes, self._key)
        v = self._plans.get(key)
        if v is None:
            locs = [(self.sig.loc(q, 0), self.sig.loc(q, 1)) for q in range(self.size)]
            v = self._cached(key, lambda: any(s[0] == d[0] >= 0 and abs(s[1] - d[1]) < nbytes for s, d in locs))
        return v

    def _ar_one_phase(self, ctx, base, x, out, op, xloc, oloc):
        """Every rank reduces the whole vector, in rank order (the same bits on every
        rank): one synchronisation instead of two. A staged rank reads its own x in
        place (its stage copy is for the peers)."""
        n, dt, count = self.size, x.dtype, x.size
        key = ("ar1", count, dt, self._key)
        srcs = self._plans.get(key)
        if srcs is None:
            srcs = self._cached(key, lambda: [self._src(q, count, dt) for q in range(n)])
        if xloc is None:
            srcs = list(srcs)
            own = _flat(x)
            # in place, more than two inputs: the chunked sum writes out before it reads
            # the later inputs, so ours is read from its (identical) stage copy then
            if n == 2 or not np.shares_memory(own, out):
                srcs[self.rank] = own
            self._reduce(op, _flat(out), srcs)
            if ctx.tracer is not None:
                self._trace(ctx, "direct read", [(q, 0, x.nbytes) for q in range(n)])
            self._finish(ctx, base, xloc)
            return
        overlap = oloc is not None and oloc[0] == xloc[0] and abs(oloc[1] - xloc[1]) < x.nbytes
        if overlap:  # out is read by peers: reduce aside, copy once everyone is done
            tmp = self._tmp.get((count, dt))
            if tmp is None:
                if len(self._tmp) >= 8:  # a caller cycling through sizes: keep memory bounded
                    self._tmp.clear()
                tmp = self._tmp[(count, dt)] = np.empty(count, dt)
            self._reduce(op, tmp, srcs)
            if ctx.tracer is not None:
                self._trace(ctx, "direct read", [(q, 0, x.nbytes) for q in range(n)])
            self._finish(ctx, base)
            np.copyto(_flat(out), tmp)
        else:
            self._reduce(op, _flat(out), srcs)
            if ctx.tracer is not None:
                self._trace(ctx, "direct read", [(q, 0, x.nbytes) for q in range(n)])
            self._finish(ctx, base)

    def _ar_plan(self, out, count, dt, dlocs, scratch):
        n, r = self.size, self.rank
        counts = split_counts(count, n, max(1, 64 // dt.itemsize))
        offs = offsets(counts)
        seg = [slice(o, o + c) for o, c in zip(offs, counts)]
        # our own source first: in place, our destination segment is that source, and
        # the chunked reduction writes a chunk before it adds the later peers into it
        srcs = [self._src(q, count, dt)[seg[r]] for q in [r] + [q for q in range(n) if q != r]]

        def dst_of(q):
            if dlocs[q][0] == STAGE_DST:
                return self._staged_view(q, self.sig.epoch, count * dt.itemsize).view(dt)
            if dlocs[q][0] < 0:
                return scratch.peers[q][:count * dt.itemsize].view(dt)
            return self.heap.peer_view(q, dlocs[q], count, dt)
        private = dlocs[r][0] < 0
        mine = dst_of(r)[seg[r]]
        keep, out = out, _flat(out)
        if not private:  # write through the heap's own view: the plan needs no user object
            out = dst_of(r)
        gathers = [(q, out[seg[q]], dst_of(q)[seg[q]]) for q in range(n) if q != r]
        if private:
            gathers.append((r, out[seg[r]], mine))
        return srcs, mine, gathers, keep  # the caller's out kept alive: the key holds its id
