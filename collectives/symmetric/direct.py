"""Direct collectives within a node: every rank reads its peers' buffers in place.

``x`` and ``out`` come as the caller passed them (any shape, C-contiguous);
what is read and written are flat views. A call posts its header with where its
source (and, for an all-reduce, its destination) lives, waits until every
peer has posted, compares the headers (signals.py), and only then reads:

- reduce-scatter: each rank reduces its own segment reading every peer's
  source segment, in cache-sized chunks (the partial result stays in cache
  while the next peer's chunk streams in), straight into ``out``.
- all-gather: each rank copies every peer's piece into ``out``.
- all-reduce: the two with no copy in between. Each rank reduces its segment
  into its destination (``out`` when that is in the heap, else symmetric
  scratch), raises its flag, and copies each peer's reduced segment as soon
  as that peer's flag says it is there. Small all-reduces (up to
  ``SMALL_BYTES``) skip the second phase: every rank reduces the whole
  vector, in rank order, so every rank computes the same bits.
- broadcast: every rank copies the root's buffer.

Each element is read once from each rank and written once. Before
returning, every rank waits until every peer says it is done reading (the
caller may overwrite its buffers as soon as we return).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import HALF, to_dtype
from ..kernels import NUMPY_KERNELS
from ..schedule import split_counts
from .signals import DONE, INPUT, READY, REDUCED

SMALL_BYTES = 32 * 1024  # all-reduces this small: one phase (every rank reduces all of it)
# two ranks: one phase up to this size for heap inputs not reduced in place (always
# for staged ones, which then skip both the second phase and the final wait). Each
# rank then reads the peer's clean input instead of the segment the peer has just
# written, and waits once less: 1.4-1.7x faster at 64 KiB-1 MiB, 1.2-2x at 4 MiB,
# even at 16 MiB, behind at 64 MiB (paired, one launch, loaded machine)
ONE_PHASE_2_BYTES = 16 << 20
CHUNK_BYTES = 64 * 1024  # the partial sum of a chunk stays in L2 while every peer's chunk is added
_F32 = np.dtype(np.float32)
STAGE_DST = -3  # a posted destination window: "my stage window"
_HALF = frozenset(to_dtype(h) for h in HALF)
_UFUNCS = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _flat(a):
    return a if a.ndim == 1 else a.reshape(-1)


def _ranges(counts):
    """One (offset, count) range per rank: the plain segments."""
    return tuple(((o, c),) for o, c in zip(_offsets(counts), counts))


def _offsets(counts):
    offs, o = [], 0
    for c in counts:
        offs.append(o)
        o += c
    return offs


class Direct:
    """The direct algorithms over one node's heap and control slots."""

    def __init__(self, heap, signals):
        self.heap, self.sig = heap, signals
        self.rank, self.size = heap.rank, heap.size
        self._plans: dict = {}
        self._tmp: dict = {}
        self._need_scratch: dict = {}
        self._staged: dict = {}  # locations -> whether some input is staged
        self.staged = False  # this call's
        # staged calls whose (agreed) input is larger take the ring over MPI after the
        # header check here (set by Symmetric when it stages, on one node)
        self.ring_above: int | None = None
        self.via_ring = False
        self._stage = None
        self._key = None

    # ---------------------------------------------------------------- plans
    def _src(self, q, count, dt):
        loc = self.sig.loc(q, 0)
        if loc[0] < 0:  # staged: in the half of q's stage window that this call uses
            return self._staged_view(q, self.sig.epoch, count * dt.itemsize).view(dt)
        return self.heap.peer_view(q, loc, count, dt)

    def _staged_view(self, q, epoch, nbytes):
        """Node rank q's stage bytes for call ``epoch``: the window's two halves
        alternate by call, so a rank may copy its next input in while a slow peer
        still reads the last one (and needs no done-reading wait for it)."""
        w = self._stage
        o = (epoch & 1) * (w.nbytes // 2 // 64 * 64)
        return w.peers[q][o:o + nbytes]

    def _start(self, ctx, hdr, x, xloc, stage_bytes, dst=(-1, -1), root=None):
        """Post, wait for every header, check; stage inputs that are not in the heap.
        A staged input is copied into the stage window before posting when the
        window is already large enough (then every rank's is: they only ever grow
        together, to agreed sizes, and nobody reads it before the check), else
        after the check, once the window has grown, and announced with INPUT.
        Returns the call's flag base; ``self._key`` names every rank's locations
        for plan caches."""
        sig = self.sig
        copy = xloc is None and (root is None or root == self.rank)
        big = root is None and self.ring_above is not None and stage_bytes > self.ring_above
        early = copy and not big and self._stage is not None and self._stage.nbytes // 2 // 64 * 64 >= stage_bytes
        if early:
            np.copyto(self._staged_view(self.rank, sig.epoch + 1, x.nbytes).view(x.dtype), _flat(x))
        base = sig.post(hdr, xloc if xloc is not None else (-1, -1), dst,
                        INPUT if xloc is not None or early else READY)
        sig.wait_all(ctx, base + READY, "header posted")
        sig.check(ctx)
        key = sig.locs_key()
        staged = self._staged.get((key, root))
        if staged is None:
            staged = self._staged[(key, root)] = sig.staging() if root is None else sig.loc(root, 0)[0] < 0
        self.staged = staged  # node-wide: some rank's input is staged this call
        self.via_ring = staged and big  # every rank decides alike: sizes and locations are agreed
        if self.via_ring:
            return base
        if staged:
            self._stage = self.heap.scratch(2 * (stage_bytes + 64), "stage")
            if copy and not early:
                np.copyto(self._staged_view(self.rank, sig.epoch, x.nbytes).view(x.dtype), _flat(x))
                sig.raise_to(base + INPUT)
            key = (key, self._stage.index, sig.epoch & 1)
            if root is None:
                sig.wait_all(ctx, base + INPUT, "input staged")
            elif self.rank != root and sig.slots[root][0] < base + INPUT:
                sig.wait(ctx, root, base + INPUT, "input staged")
        self._key = key
        return base

    def _cached(self, key, build):
        p = self._plans.get(key)
        if p is None:
            if len(self._plans) > 256:
                self._plans.clear()
            p = self._plans[key] = build()
        return p

    def _locs(self, which):
        s = self.sig
        return tuple(s.loc(q, which) for q in range(self.size))  # slow: only when building a plan

    def _reduce(self, op, dst, srcs):
        """dst = op over srcs, in rank order (chunked when more than two are added)."""
        f = _UFUNCS[op]
        if len(srcs) == 1:
            np.copyto(dst, srcs[0])
        elif dst.dtype in _HALF:  # float32 accumulator, rounded once
            step = CHUNK_BYTES // 4
            for lo in range(0, dst.size, step):
                acc = srcs[0][lo:lo + step].astype(_F32)
                for s in srcs[1:]:
                    f(acc, s[lo:lo + step].astype(_F32), out=acc)
                dst[lo:lo + step] = acc.astype(dst.dtype)
        elif len(srcs) == 2:
            f(srcs[0], srcs[1], out=dst)
        else:
            step = max(1, CHUNK_BYTES // dst.itemsize)
            for lo in range(0, dst.size, step):
                d = dst[lo:lo + step]
                f(srcs[0][lo:lo + step], srcs[1][lo:lo + step], out=d)
                for s in srcs[2:]:
                    f(d, s[lo:lo + step], out=d)
        if op == "avg":
            NUMPY_KERNELS.scale(dst, self.size)

    def _trace(self, ctx, phase, reads):
        """Record direct reads as receives (the trace's byte totals and Chrome view
        show them beside the ring's): ``reads`` is [(node rank, segment, bytes)]."""
        w = self.sig.world
        for q, seg, nbytes in reads:
            if q != self.rank and nbytes:
                ctx.tracer.event("recv", rank=ctx.rank, label=ctx.label, phase=phase, step=0, peer=w[q], seg=seg,
                                  nbytes=int(nbytes))

    def _finish(self, ctx, base, xloc=0):
        """Done reading peers' buffers; return once every peer is too. A rank whose
        input was staged (``xloc`` None) and whose destination nobody reads need not
        wait: peers read only its stage copy, whose half is not rewritten until
        they have posted the next call (which every call waits for)."""
        self.sig.raise_to(base + DONE)
        if xloc is not None:
            self.sig.wait_all(ctx, base + DONE, "done reading")

    def _by_ring(self, ctx, base, kind, x, out, counts, op):
        """A large staged call: the ring over MPI point-to-point (collectives/ring.py)
        once the headers agree here (its own agreement is skipped). Staging copies
        every input once more than the ring's single-copy transfers move, which
        from about a megabyte costs more than the direct reads save."""
        from .. import ring
        xf = _flat(x)
        of = xf if out is x else _flat(out)
        f = "sum" if op == "avg" else op
        if kind == "all_reduce":
            ring.all_reduce(ctx, xf, of, split_counts(xf.size, self.size, max(1, 64 // xf.itemsize)), f)
        elif kind == "reduce_scatter":
            if np.shares_memory(xf, of):  # the ring's reduce-scatter may not write into its input
                xf = xf.copy()
            ring.reduce_scatter(ctx, xf, of, list(counts), f)
        else:
            ring.all_gather(ctx, xf, of, list(counts))
        if op == "avg":
            NUMPY_KERNELS.scale(of, self.size)
        self.sig.raise_to(base + DONE)

    # ------------------------------------------------------------ collectives
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
            scratch = self._need_scratch[locs] = any(w == -1 for w, _ in self._locs(1))
        if scratch:  # some rank's out is private: segments are reduced into symmetric scratch
            scratch = self.heap.scratch(x.nbytes)
        key = ("ar", count, dt, locs, scratch.index if scratch else -1, id(out) if oloc is None else 0)
        srcs, mine, gathers, _ = self._cached(key, lambda: self._ar_plan(out, count, dt, self._locs(1), scratch))
        self._reduce(op, mine, srcs)
        if ctx.tracer is not None:
            self._trace(ctx, "direct reduce-scatter", [(q, self.rank, mine.nbytes) for q in range(n)])
        sig.raise_to(base + REDUCED)
        for q, dst, src in gathers:
            if sig.slots[q][0] < base + REDUCED:
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
        offs = _offsets(counts)
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

    def reduce_scatter(self, ctx, hdr, x, out, counts, op, xloc, ranges=None):
        """Node rank r gets segment r, or with ``ranges`` (per node rank, a tuple of
        (offset, count) in x: what the hierarchy needs) those ranges, concatenated."""
        dt = x.dtype
        base = self._start(ctx, hdr, x, xloc, x.nbytes)
        if self.via_ring:
            return self._by_ring(ctx, base, "reduce_scatter", x, out, counts, op)
        key = ("rs", x.size, dt, tuple(counts) if ranges is None else ranges, self._key)
        plan = self._cached(key, lambda: self._rs_plan(x.size, dt, ranges or _ranges(counts)))
        out = _flat(out)
        r = self.rank
        for sl, srcs, o, c in plan:
            if xloc is None:  # staged: our own input read in place (the stage copy is the peers')
                own = _flat(x)[o:o + c]
                dst = out[sl]
                if self.size == 2 or not np.shares_memory(own, dst):
                    srcs = srcs[:]
                    srcs[r] = own
            self._reduce(op, out[sl], srcs)
        if ctx.tracer is not None:
            n = sum(p[1][0].nbytes for p in plan)
            self._trace(ctx, "direct reduce-scatter", [(q, self.rank, n) for q in range(self.size)])
        self._finish(ctx, base, xloc)

    def _rs_plan(self, count, dt, ranges):
        views = [self._src(q, count, dt) for q in range(self.size)]
        plan, at = [], 0
        for o, c in ranges[self.rank]:
            plan.append((slice(at, at + c), [v[o:o + c] for v in views], o, c))
            at += c
        return plan

    def all_gather(self, ctx, hdr, x, out, counts, xloc, ranges=None):
        """Every rank's x into out at its offset, or with ``ranges`` (per node rank, a
        tuple of (offset in out, count)) each rank's x split over those ranges."""
        dt = x.dtype
        base = self._start(ctx, hdr, x, xloc, max(counts) * dt.itemsize if ranges is None else
                           max(sum(c for _, c in r) for r in ranges) * dt.itemsize)
        if self.via_ring:
            return self._by_ring(ctx, base, "all_gather", x, out, counts, None)
        key = ("ag", dt, tuple(counts) if ranges is None else ranges, self._key)
        pieces = self._cached(key, lambda: self._ag_plan(dt, ranges or _ranges(counts)))
        out, xf, r = _flat(out), _flat(x), self.rank
        for sl, src, q, at in pieces:
            if q == r and xloc is None:  # staged: our own piece straight from x
                src = xf[at:at + src.size]
                if np.shares_memory(src, out):
                    continue  # in place: already there (x is our piece of out)
            np.copyto(out[sl], src)
        if ctx.tracer is not None:
            self._trace(ctx, "direct all-gather", [(q, q, sum(c for _, c in rq) * dt.itemsize)
                                                   for q, rq in enumerate(ranges or _ranges(counts))])
        self._finish(ctx, base, xloc)

    def _ag_plan(self, dt, ranges):
        plan = []
        for q, rq in enumerate(ranges):
            src, at = self._src(q, sum(c for _, c in rq), dt), 0
            for o, c in rq:
                plan.append((slice(o, o + c), src[at:at + c], q, at))
                at += c
        return plan

    def broadcast(self, ctx, hdr, x, out, root, xloc):
        sig = self.sig
        base = self._start(ctx, hdr, x, xloc, x.nbytes, root=root)
        if self.rank == root:
            if out is not x:
                np.copyto(_flat(out), _flat(x))
            self._finish(ctx, base, xloc)  # staged: peers read the stage copy, not x
        else:
            np.copyto(_flat(out), self._src(root, x.size, x.dtype))
            if ctx.tracer is not None:
                self._trace(ctx, "direct broadcast", [(root, root, x.nbytes)])
            sig.raise_to(base + DONE)  # the root waits for this; nobody reads ours

    def barrier(self, ctx, hdr):
        base = self.sig.post(hdr)
        self.sig.wait_all(ctx, base + READY, "entered the barrier")
        self.sig.check(ctx)
