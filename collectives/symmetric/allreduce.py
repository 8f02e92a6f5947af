"""The direct all-reduce (a part of Direct, see direct.py).

Push (every rank's ``out`` in the heap): each rank reduces its own segment
chunk by chunk and writes each chunk, still in cache, into every rank's
``out``; then done. Pull (some ``out`` private): each rank reduces its
segment into its destination (``out`` when that is in the heap, else
symmetric scratch, or its stage window when its input is staged), raises its
flag, and copies each peer's reduced segment as soon as that peer's flag says
it is there. One phase: every rank reduces the whole vector, in rank order,
so every rank computes the same bits; that is how all-reduces up to
``SMALL_BYTES`` run, and on two ranks staged ones and heap ones up to
``ONE_PHASE_2_BYTES`` that neither push nor reduce in place
(``one_phase_2``). docs/symmetric.md has the measurements behind each.
"""
from __future__ import annotations

from typing import NamedTuple

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
PUSH_CHUNK_BYTES = 256 * 1024  # a reduced chunk is written to every peer while it is still in L2
STAGE_DST = -3  # a posted destination window: "my stage window"


def pushable(srcs, dsts, nbytes) -> bool:
    """Whether every rank's destination is in the heap and is either its source or
    clear of it (from the posted locations). Then each segment's owner writes it
    into every destination straight from cache: the pull's second pass (each
    rank reading its peers' reduced segments back from memory) is gone, so
    memory sees each input read once and each output written once, the
    roofline's traffic, where the pull moved a quarter more on two ranks."""
    for s, d in zip(srcs, dsts):
        if d[0] < 0 or (s[0] == d[0] and s[1] != d[1] and abs(s[1] - d[1]) < nbytes):
            return False
    return True


def one_phase(n, nbytes, staged, two_phases) -> bool:
    """Whether an all-reduce takes one phase (every rank reduces the whole vector):
    up to SMALL_BYTES; on two ranks also when some input is staged, or up to
    ONE_PHASE_2_BYTES unless ``two_phases(nbytes)`` (the posted locations say the
    push applies or some rank reduces in place: one_phase_2). The one rule for
    the Python path and the C programs (programs.py)."""
    return nbytes <= SMALL_BYTES or (n == 2 and (staged or (nbytes <= ONE_PHASE_2_BYTES and not two_phases(nbytes))))


def one_phase_2(srcs, dsts, nbytes) -> bool:
    """Two ranks, no input staged, up to ONE_PHASE_2_BYTES: one phase unless the
    push applies or some destination overlaps its heap source."""
    if nbytes > SMALL_BYTES and pushable(srcs, dsts, nbytes):
        return False
    return not any(s[0] == d[0] >= 0 and abs(s[1] - d[1]) < nbytes for s, d in zip(srcs, dsts))


class Pushed(NamedTuple):
    """A pushed all-reduce's plan: our segment's bytes and its chunks (_push_plan)."""

    nbytes: int
    chunks: list


def _counts(count, n, dt):
    """Every rank's segment of an all-reduce (in elements; whole cache lines)."""
    return split_counts(count, n, max(1, 64 // dt.itemsize))


def _flat(a):
    return a if a.ndim == 1 else a.reshape(-1)


class AllReduce:
    """Direct's all-reduce (a mixin: the state and helpers are Direct's)."""

    def all_reduce(self, ctx, hdr, x, out, op, xloc, oloc):
        sig, n, dt, count = self.sig, self.size, x.dtype, x.size
        # destination: out when in the heap; else our stage window when x is staged
        # (our own copy: reduce there in place, STAGE_DST); else symmetric scratch
        dst = oloc if oloc is not None else (STAGE_DST, 0) if xloc is None else (-1, -1)
        pipe = self.pipe_min is not None and self._piped("all_reduce", x.nbytes, dt, op)
        base = self._start(ctx, hdr, x, xloc, x.nbytes, dst, pipe=pipe)
        if self.via_ring:
            if pipe:
                return self._by_pipe(ctx, base, "all_reduce", x, out, None, op)
            return self._by_ring(ctx, base, "all_reduce", x, out, None, op)
        if one_phase(n, x.nbytes, self.staged, self._two_phases):
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
        plan = self._cached(key, lambda: self._ar_plan(out, count, dt, self._locs(1), scratch))
        if type(plan) is Pushed:  # every destination in the heap: reduce, write into every one
            return self._ar_push(ctx, base, op, plan, count, dt)
        srcs, mine, gathers, _ = plan
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

    def _ar_push(self, ctx, base, op, plan, count, dt):
        for d, srcs, pushes in plan.chunks:
            self._reduce(op, d, srcs)
            for p in pushes:
                np.copyto(p, d)
        n = self.size
        if ctx.tracer is not None:
            self._trace(ctx, "direct reduce-scatter", [(q, self.rank, plan.nbytes) for q in range(n)])
        self._finish(ctx, base)  # every peer done: every segment is in our out
        if ctx.tracer is not None:  # what landed in our out: each peer's segment, written by its owner
            self._trace(ctx, "direct all-gather", [(q, q, c * dt.itemsize) for q, c in
                                                   enumerate(_counts(count, n, dt)) if q != self.rank], pushed=True)

    def _pushable(self, dlocs, nbytes) -> bool:
        return pushable([self.sig.loc(q, 0) for q in range(self.size)], dlocs, nbytes)

    def _push_plan(self, srcs, mine, pushes):
        """Our segment's chunks, each (destination, sources, the peers' destinations).
        A chunk is read from every input before it is written anywhere, so a rank
        reducing in place overwrites only inputs already read (only the segment's
        owner touches it, in any buffer)."""
        step = max(1, PUSH_CHUNK_BYTES // mine.itemsize)
        return Pushed(mine.nbytes, [(mine[lo:lo + step], [s[lo:lo + step] for s in srcs],
                                     [p[lo:lo + step] for p in pushes]) for lo in range(0, mine.size, step)])

    def _two_phases(self, nbytes):
        """Two ranks, a heap input: whether the call takes two phases anyway (from the
        posted locations, so every rank decides alike). It does when every
        destination is in the heap (pushed: less traffic than one phase from 64 KiB,
        1.0-1.6x faster in C, paired), or when some rank's destination overlaps its
        heap source (one phase would reduce aside and copy, which costs more)."""
        key = ("two", nbytes, self._key)
        v = self._plans.get(key)
        if v is None:
            srcs, dsts = self._locs(0), self._locs(1)
            v = self._cached(key, lambda: not one_phase_2(srcs, dsts, nbytes))
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
        """The push's plan (Pushed) when it applies, else the pull's: (our sources,
        our destination segment, [(peer, where in out, its reduced segment)], out)."""
        n, r = self.size, self.rank
        counts = _counts(count, n, dt)
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
        if self._pushable(dlocs, count * dt.itemsize):
            return self._push_plan(srcs, mine, [dst_of(q)[seg[r]] for q in range(n) if q != r])
        keep, out = out, _flat(out)
        if not private:  # write through the heap's own view: the plan needs no user object
            out = dst_of(r)
        gathers = [(q, out[seg[q]], dst_of(q)[seg[q]]) for q in range(n) if q != r]
        if private:
            gathers.append((r, out[seg[r]], mine))
        return srcs, mine, gathers, keep  # the caller's out kept alive: the key holds its id
