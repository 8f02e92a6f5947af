"""The direct all-reduce (a collaborator of Direct, direct.py).

Push (every rank's ``out`` in the heap): each rank reduces its own segment
chunk by chunk and writes each chunk, still in cache, into every rank's
``out``; then done. Pull (some ``out`` private): each rank reduces its
segment into its destination (``out`` when that is in the heap, else
symmetric scratch, or its stage window when its input is staged), raises its
flag, and copies each peer's reduced segment as soon as that peer's flag says
it is there. One phase: every rank reduces the whole vector, in rank order,
so every rank computes the same bits. roads.choose says which, from where
every rank posted its buffers.

Read in place (private arrays past the stage limit, or out of place from the
tuning's ``cma_min_all_reduce``, up to ``cma_max_all_reduce``): every rank
offers its x and out (cma.py) and reduces its own segment into out chunk by
chunk, each chunk of every peer's segment of x read with process_vm_readv into
a small scratch that stays in cache; then REDUCED, and each peer's reduced
segment is read from its out straight into ours. No stage copy, no
point-to-point messages: the copies and the reduction MPI's all-reduce makes,
less the pass over a received segment in memory.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..host.schedule import offsets, split_counts
from ..roads import Road
from .cma import Remote, address, cma_read
from .signals import CMA_WIN, PRIVATE, REDUCED, STAGE_WIN


def pushable(srcs, dsts, nbytes) -> bool:
    """Whether every rank's destination is in the heap and is either its source or
    clear of it (from the posted locations). Then each segment's owner writes it
    into every destination straight from cache: the pull's second pass (each
    rank reading its peers' reduced segments back from memory) is gone, so
    memory sees each input read once and each output written once."""
    for s, d in zip(srcs, dsts):
        if d[0] < 0 or (s[0] == d[0] and s[1] != d[1] and abs(s[1] - d[1]) < nbytes):
            return False
    return True


def overlapping(srcs, dsts, nbytes) -> bool:
    """Whether some rank's destination overlaps its heap source (one phase would then
    reduce aside and copy)."""
    return any(s[0] == d[0] >= 0 and abs(s[1] - d[1]) < nbytes for s, d in zip(srcs, dsts))


class ReadPlan(NamedTuple):
    """An all-reduce read in place (AllReduce.read_plan): ``chunks``, each (our out's chunk,
    [our x's chunk, then a scratch chunk per peer in signals' ``others`` order], the chunk's
    byte offset in every x); ``gathers``, each (peer, its segment of our out, the segment's
    byte offset in every out)."""

    chunks: list
    gathers: list


class Pushed(NamedTuple):
    """A pushed all-reduce's plan: our segment's bytes and its chunks (push_plan)."""

    nbytes: int
    chunks: list


def segments(count, n, dt):
    """Every rank's segment of an all-reduce (in elements; whole cache lines)."""
    return split_counts(count, n, max(1, 64 // dt.itemsize))


def flat(a):
    return a if a.ndim == 1 else a.reshape(-1)


class AllReduce:
    """Direct's all-reduce.

    Args:
      d: the Direct whose heap, slots and steps it uses.
    """

    def __init__(self, d):
        self.d = d
        self._scratch = []  # read_in_place's chunk buffers: kept while the communicator lives

    def scratch(self, count, dt):
        """``count`` elements of ``dt`` for read_in_place's chunks, in memory that lives as long
        as the communicator: the C programs written for it (and the lane's copies of them,
        which may outlive a program) address it."""
        need = count * dt.itemsize
        if not self._scratch or self._scratch[-1].nbytes < need:
            self._scratch.append(np.empty(max(need, 64), np.uint8))  # the old ones stay alive
        return self._scratch[-1][:need].view(dt)

    def run(self, ctx, hdr, x, out, op, xloc, oloc):
        d = self.d
        n, dt, count, nbytes = d.size, x.dtype, x.size, x.nbytes
        offer = self.offers(x, out, op, xloc, oloc)
        # destination: out read in place (with x) when offered; out when in the heap; else our
        # stage window when x is staged (our own copy: reduce there in place, STAGE_WIN); else symmetric scratch
        dst = (CMA_WIN, address(out)) if offer else oloc if oloc is not None else (STAGE_WIN, 0) if xloc is None \
            else (PRIVATE, PRIVATE)
        base = d.start(ctx, hdr, x, xloc, nbytes, dst, leaves=d.leaves("all_reduce", nbytes, nbytes, dt, op),
                       offer=offer)
        offered = d.cached(("ar offered", d.key), lambda: [d.sig.loc(q, 0)[0] == CMA_WIN for q in range(n)])
        if all(offered):  # every rank offered its x and out
            d.road = Road.DIRECT
            return self.read_in_place(ctx, base, x, out, op)
        if any(offered):  # some did (another staged, or passed a heap array): every rank takes the
            # messages (agreed from the posts)
            d.road = Road.STAGED_RING
            return d.leave(ctx, base, "all_reduce", x, out, None, op)
        road = d.choose("all_reduce", nbytes, nbytes, dt, op,
                        lambda: pushable(d.locs(0), d.locs(1), nbytes), lambda: overlapping(d.locs(0), d.locs(1), nbytes))
        if road is Road.PIPE or road is Road.STAGED_RING:
            return d.leave(ctx, base, "all_reduce", x, out, None, op)
        if road is Road.ONE_PHASE:
            return self.one_phase(ctx, base, x, out, op, xloc, oloc)
        scratch = d.cached(("scratch", d.key), lambda: any(w == PRIVATE for w, _ in d.locs(1)))
        if scratch:  # some rank's out is private: segments are reduced into symmetric scratch
            scratch = d.heap.scratch(nbytes)
        key = ("ar", count, dt, d.key, scratch.index if scratch else -1, id(out) if oloc is None else 0)
        plan = d.cached(key, lambda: self.plan(out, count, dt, d.locs(1), scratch))
        if type(plan) is Pushed:  # every destination in the heap: reduce, write into every one
            return self.push(ctx, base, op, plan, count, dt)
        srcs, mine, gathers, _ = plan
        d.reduce(op, mine, srcs)
        if ctx.tracer is not None:
            d.trace(ctx, "direct reduce-scatter", [(q, d.rank, mine.nbytes) for q in range(n)])
        sig = d.sig
        sig.flag[0] = base + REDUCED
        flags = sig.flags
        for q, to, src in gathers:
            if flags[q][0] < base + REDUCED:
                sig.wait(ctx, q, base + REDUCED, "segment reduced")
            np.copyto(to, src)
        if ctx.tracer is not None:
            d.trace(ctx, "direct all-gather", [(q, q, src.nbytes) for q, _, src in gathers])
        d.finish(ctx, base, None if xloc is None and oloc is None else 0)  # peers read our out when in the heap

    def offers(self, x, out, op, xloc, oloc) -> bool:
        """Whether this rank offers x and out to be read in place: a private all-reduce up to
        cma_max_all_reduce that a staged call would take over messages (past
        stage_max_all_reduce), or out of place from cma_min_all_reduce where it would not
        pipe; where the node's kernel allows it and no road is forced."""
        d, t = self.d, self.d.tuning
        if xloc is not None or oloc is not None or d.pids is None or not 0 < x.nbytes <= t.cma_max_all_reduce \
                or "all_reduce" in d.forced:
            return False
        road = d.if_staged("all_reduce", x.nbytes, x.nbytes, x.dtype, op)
        return road is Road.STAGED_RING or (road is not Road.PIPE and x.nbytes >= t.cma_min_all_reduce
                                            and address(out) != address(x))

    def read_plan(self, x, out):
        """read_in_place's steps for these x and out, shared with its C program (fast/calls.py):
        ReadPlan's chunks of our segment, and every peer's segment of our out."""
        d = self.d
        n, r, dt = d.size, d.rank, x.dtype
        xf, of, isz = flat(x), flat(out), dt.itemsize
        offs = offsets(segments(xf.size, n, dt))
        a, b = offs[r], offs[r + 1]
        step = max(1, d.tuning.cma_chunk_bytes // isz)
        tmp = self.scratch(step * (n - 1), dt)
        chunks = []
        for lo in range(a, b, step):
            c = min(step, b - lo)
            chunks.append((of[lo:lo + c], [xf[lo:lo + c]] + [tmp[i * step:i * step + c] for i in range(n - 1)], lo * isz))
        return ReadPlan(chunks, [(q, of[offs[q]:offs[q + 1]], offs[q] * isz) for q in d.sig.others])

    def read_in_place(self, ctx, base, x, out, op):
        """Every rank's x and out read in place: our segment of out reduced chunk by chunk
        (each peer's chunk of x read into scratch; our x first), REDUCED, every peer's
        reduced segment read from its out into ours, then done, and the wait for the peers
        reading ours. In place (out over x's memory) is safe: only we write our segment,
        and we write a peer's only after its REDUCED, by which time it has read ours."""
        d = self.d
        sig = d.sig
        plan = self.read_plan(x, out)
        for ours, srcs, at in plan.chunks:
            for buf, q in zip(srcs[1:], sig.others):  # at the address of x q posted
                cma_read(ctx, buf, Remote(d.pids[q], sig.loc(q, 0)[1] + at, buf.nbytes, sig.world[q]))
            d.reduce(op, ours, srcs)
        sig.flag[0] = base + REDUCED
        for q, seg, at in plan.gathers:
            if sig.flags[q][0] < base + REDUCED:
                sig.wait(ctx, q, base + REDUCED, "segment reduced")
            cma_read(ctx, seg, Remote(d.pids[q], sig.loc(q, 1)[1] + at, seg.nbytes, sig.world[q]))  # its out
        if ctx.tracer is not None:
            mine = sum(ours.nbytes for ours, _, _ in plan.chunks)
            d.trace(ctx, "direct reduce-scatter", [(q, d.rank, mine) for q in range(d.size)])
            d.trace(ctx, "direct all-gather", [(q, q, seg.nbytes) for q, seg, _ in plan.gathers])
        d.finish(ctx, base, 0)  # peers read our x and out: wait until they are done

    def push(self, ctx, base, op, plan, count, dt):
        d = self.d
        for dst, srcs, pushes in plan.chunks:
            d.reduce(op, dst, srcs)
            for p in pushes:
                np.copyto(p, dst)
        n = d.size
        if ctx.tracer is not None:
            d.trace(ctx, "direct reduce-scatter", [(q, d.rank, plan.nbytes) for q in range(n)])
        d.finish(ctx, base)  # every peer done: every segment is in our out
        if ctx.tracer is not None:  # what landed in our out: each peer's segment, written by its owner
            d.trace(ctx, "direct all-gather", [(q, q, c * dt.itemsize) for q, c in
                                               enumerate(segments(count, n, dt)) if q != d.rank], pushed=True)

    def push_plan(self, srcs, mine, pushes):
        """Our segment's chunks, each (destination, sources, the peers' destinations).
        A chunk is read from every input before it is written anywhere, so a rank
        reducing in place overwrites only inputs already read (only the segment's
        owner touches it, in any buffer)."""
        step = max(1, self.d.tuning.push_chunk_bytes // mine.itemsize)
        return Pushed(mine.nbytes, [(mine[lo:lo + step], [s[lo:lo + step] for s in srcs],
                                     [p[lo:lo + step] for p in pushes]) for lo in range(0, mine.size, step)])

    def one_phase(self, ctx, base, x, out, op, xloc, oloc):
        """Every rank reduces the whole vector, in rank order (the same bits on every
        rank): one synchronisation instead of two. A staged rank reads its own x in
        place (its stage copy is for the peers)."""
        d = self.d
        n, dt, count = d.size, x.dtype, x.size
        srcs = d.cached(("ar1", count, dt, d.key), lambda: [d.src(q, count, dt) for q in range(n)])
        if xloc is None:
            srcs = list(srcs)
            own = flat(x)
            # in place, more than two inputs: the chunked sum writes out before it reads
            # the later inputs, so ours is read from its (identical) stage copy then
            if n == 2 or not np.shares_memory(own, out):
                srcs[d.rank] = own
            d.reduce(op, flat(out), srcs)
            if ctx.tracer is not None:
                d.trace(ctx, "direct read", [(q, 0, x.nbytes) for q in range(n)])
            d.finish(ctx, base, xloc)
            return
        aside = oloc is not None and oloc[0] == xloc[0] and abs(oloc[1] - xloc[1]) < x.nbytes
        if aside:  # out is read by peers: reduce aside, copy once everyone is done
            tmp = d.scratch_array(count, dt)
            d.reduce(op, tmp, srcs)
        else:
            d.reduce(op, flat(out), srcs)
        if ctx.tracer is not None:
            d.trace(ctx, "direct read", [(q, 0, x.nbytes) for q in range(n)])
        d.finish(ctx, base)
        if aside:
            np.copyto(flat(out), tmp)

    def plan(self, out, count, dt, dlocs, scratch):
        """The push's plan (Pushed) when it applies, else the pull's: (our sources,
        our destination segment, [(peer, where in out, its reduced segment)], out)."""
        d = self.d
        n, r = d.size, d.rank
        counts = segments(count, n, dt)
        offs = offsets(counts)
        seg = [slice(o, o + c) for o, c in zip(offs, counts)]
        # our own source first: in place, our destination segment is that source, and
        # the chunked reduction writes a chunk before it adds the later peers into it
        srcs = [d.src(q, count, dt)[seg[r]] for q in [r] + [q for q in range(n) if q != r]]

        def dst_of(q):
            if dlocs[q][0] == STAGE_WIN:
                return d.staged_view(q, d.sig.epoch, count * dt.itemsize).view(dt)
            if dlocs[q][0] < 0:
                return scratch.peers[q][:count * dt.itemsize].view(dt)
            return d.heap.peer_view(q, dlocs[q], count, dt)
        private = dlocs[r][0] < 0
        mine = dst_of(r)[seg[r]]
        if d.road is Road.PUSH:
            return self.push_plan(srcs, mine, [dst_of(q)[seg[r]] for q in range(n) if q != r])
        keep, out = out, flat(out)
        if not private:  # write through the heap's own view: the plan needs no user object
            out = dst_of(r)
        gathers = [(q, out[seg[q]], dst_of(q)[seg[q]]) for q in range(n) if q != r]
        if private:
            gathers.append((r, out[seg[r]], mine))
        return srcs, mine, gathers, keep  # the caller's out kept alive: the key holds its id
