"""Direct collectives within a node: every rank reads its peers' buffers in place.

``x`` and ``out`` come as the caller passed them (any shape, C-contiguous);
what is read and written are flat views. A call posts its header with where its
source (and, for an all-reduce or all-gather, its destination) lives, waits
until every peer has posted, compares the headers (signals.py), and only then
reads:

- reduce-scatter: each rank reduces its own segment reading every peer's
  source segment, in cache-sized chunks (the partial result stays in cache
  while the next peer's chunk streams in), straight into ``out``.
- all-gather (gather.py): each rank copies every peer's piece into ``out``;
  or, when every input and ``out`` is in the heap, writes its own piece into
  every ``out`` (the push).
- all-reduce (allreduce.py): the reduce-scatter, then each reduced segment
  written by its owner into every ``out`` (the push, every ``out`` in the
  heap) or copied by every peer (the pull); or one phase where every rank
  reduces the whole vector.
- broadcast: every rank copies the root's buffer.

Each element is read once from each rank and written once. Before
returning, every rank waits until every peer says it is done reading (the
caller may overwrite its buffers as soon as we return), unless peers read
only its stage copy (see _finish).

Ordinary arrays are staged (by default on two ranks of one node, see
symmetric/__init__.py): copied into one half of a symmetric stage window, the
halves alternating by call, only the bytes peers read (a reduce-scatter's own
segment is read in place, so it is not copied); above ``stage_max[kind]``
bytes a staged call takes the ring over MPI after the header check instead
(``_by_ring``).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import HALF, to_dtype
from ..kernels import NUMPY_KERNELS
from .allreduce import AllReduce, _flat
from .by_ring import by_ring
from .cma import CMA_WIN
from .cma import address as _addr
from .cma import MIN_BYTES as CMA_MIN_BYTES
from .fast import resumed
from .gather import AllGather
from .pipe import by_pipe, chunk_bytes, piped
from .signals import DONE, INPUT, READY
from .stage import copy_in, rs_parts
from .stage import ranges_of as _ranges

CHUNK_BYTES = 64 * 1024  # the partial sum of a chunk stays in L2 while every peer's chunk is added
_F32 = np.dtype(np.float32)
_HALF = frozenset(to_dtype(h) for h in HALF)
_UFUNCS = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class Direct(AllReduce, AllGather):
    """The direct algorithms over one node's heap and control slots."""

    def __init__(self, heap, signals):
        self.heap, self.sig = heap, signals
        self.rank, self.size = heap.rank, heap.size
        self._plans: dict = {}
        self._tmp: dict = {}
        self._work: dict = {}  # views bound to the caller's arrays (see _bind)
        self._need_scratch: dict = {}
        self._staged: dict = {}  # locations -> whether some input is staged
        self.staged = False  # this call's
        # per collective: staged calls whose (agreed) input is larger take the ring over
        # MPI after the header check here (set by staged() by default, on one node;
        # None stages every size)
        self.stage_max: dict | None = None
        self.via_ring = False
        # per collective: staged calls at least this large take the pipe instead of the
        # ring (pipe.py; set by staged(); None: never)
        self.pipe_min: dict | None = None
        self.pipe_chunk = chunk_bytes()
        self._stage = None
        self._key = None
        self._resume = None  # (base, rc, program): a C program stopped in this call (fast.py)
        self.pids = None  # the node's pids, where every rank may read the others' memory (cma.py)
        self.offered = False  # this call's input was offered to peers in place (cma.py)

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

    def _start(self, ctx, hdr, x, xloc, stage_bytes, dst=(-1, -1), root=None, kind="all_reduce", parts=None,
               cma=False, pipe=False):
        """Post, wait for every header, check; stage inputs that are not in the heap.
        A staged input is copied into the stage window before posting when the
        window is already large enough (then every rank's is: they only ever grow
        together, to agreed sizes, and nobody reads it before the check), else
        after the check, once the window has grown, and announced with INPUT.
        ``parts``: the (offset, count) ranges of x that peers read (None: all).
        ``cma``: a private input of at least cma.MIN_BYTES is offered in place
        instead (peers read it with process_vm_readv, see cma.py).
        ``pipe``: a staged call goes through the pipe (pipe.py), not copied in:
        then ``via_ring`` says the call leaves the direct algorithms, for the pipe.
        Returns the call's flag base; ``self._key`` names every rank's locations
        for plan caches."""
        sig = self.sig
        big = pipe or (self.stage_max is not None and stage_bytes > self.stage_max[kind])
        offer = self.offered = cma and xloc is None and self.pids is not None and stage_bytes >= CMA_MIN_BYTES
        copy = xloc is None and not offer and (root is None or root == self.rank)
        if self._resume is not None:  # a C program posted, waited and checked (fast.py)
            base, early = self._resumed(ctx), copy
        else:
            if xloc is not None or offer:  # the hot path: our input is in the heap, or read in place
                early = False
                base = sig.post(hdr, xloc if xloc is not None else (CMA_WIN, _addr(x)), dst, INPUT)
            else:
                need = 2 * ((stage_bytes + 63) // 64 * 64)  # two halves, each on whole cache lines
                # early only when the window will not grow below (the copy would be lost)
                early = copy and not big and self._stage is not None and self._stage.nbytes >= need
                if early:
                    self._copy_in(sig.epoch + 1, x, parts)
                base = sig.post(hdr, (-1, -1), dst, INPUT if early else READY)
            sig.wait_all(ctx, base + READY, "header posted")
            sig.check(ctx)
        key = sig.locs_key()
        staged = self._staged.get((key, root))
        if staged is None:
            if len(self._staged) > 256:
                self._staged.clear()
            staged = self._staged[(key, root)] = sig.staging() if root is None else sig.loc(root, 0)[0] < 0
        self.staged = staged  # node-wide: some rank's input is staged this call
        self.via_ring = staged and big  # every rank decides alike: sizes and locations are agreed
        if self.via_ring:
            return base
        if staged:
            need = 2 * ((stage_bytes + 63) // 64 * 64)
            self._stage = self.heap.scratch(need, "stage")
            if copy and not early:
                self._copy_in(sig.epoch, x, parts)
                sig.raise_to(base + INPUT)
            key = (key, self._stage.index, sig.epoch & 1)
            if root is None:
                sig.wait_all(ctx, base + INPUT, "input staged")
            elif self.rank != root and sig.slots[root][0] < base + INPUT:
                sig.wait(ctx, root, base + INPUT, "input staged")
        self._key = key
        return base

    _copy_in = copy_in  # staging (stage.py)
    _rs_parts = rs_parts

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

    def _trace(self, ctx, phase, reads, pushed=False):
        """Record direct reads as receives (the trace's byte totals and Chrome view
        show them beside the ring's): ``reads`` is [(node rank, segment, bytes)].
        ``pushed``: the bytes were written into our out by their owner (the push),
        not read by us; recorded alike, marked so (explain says who copied)."""
        w = self.sig.world
        more = {"pushed": True} if pushed else {}
        for q, seg, nbytes in reads:
            if q != self.rank and nbytes:
                ctx.tracer.event("recv", rank=ctx.rank, label=ctx.label, phase=phase, step=0, peer=w[q], seg=seg,
                                  nbytes=int(nbytes), **more)

    def _finish(self, ctx, base, xloc=0):
        """Done reading peers' buffers; return once every peer is too. A rank whose
        input was staged (``xloc`` None) and whose destination nobody reads need not
        wait: peers read only its stage copy, whose half is not rewritten until
        they have posted the next call (which every call waits for)."""
        sig = self.sig
        sig.flag[0] = base + DONE
        if xloc is not None:
            sig.wait_all(ctx, base + DONE, "done reading")

    _by_ring = by_ring  # large staged calls: the ring over MPI (by_ring.py)
    _by_pipe = by_pipe  # larger ones: the pipe (pipe.py)
    _piped = piped

    # ------------------------------------------------------------ collectives
    def reduce_scatter(self, ctx, hdr, x, out, counts, op, xloc, ranges=None):
        """Node rank r gets segment r, or with ``ranges`` (per node rank, a tuple of
        (offset, count) in x: what the hierarchy needs) those ranges, concatenated."""
        dt = x.dtype
        ckey = tuple(counts) if ranges is None else ranges
        parts = self._rs_parts(x, out, xloc, counts, ranges, ckey)  # staged: only what peers read
        base = self._start(ctx, hdr, x, xloc, x.nbytes, kind="reduce_scatter", parts=parts)
        if self.via_ring:
            return self._by_ring(ctx, base, "reduce_scatter", x, out, counts, op)
        wkey = ("rs", id(x), id(out), x.size, out.size, dt, ckey, self._key, xloc is None)
        work = self._work.get(wkey)
        if work is None or work[0] is not x or work[1] is not out:
            work = self._bind(wkey, x, out, self._rs_work(x, out, xloc, ckey, ranges or _ranges(counts)))
        for dst, srcs in work[2]:
            self._reduce(op, dst, srcs)
        if ctx.tracer is not None:
            n = sum(srcs[0].nbytes for _, srcs in work[2])
            self._trace(ctx, "direct reduce-scatter", [(q, self.rank, n) for q in range(self.size)])
        self._finish(ctx, base, xloc)

    def _bind(self, wkey, x, out, work):
        """Remember the views a call on these very arrays reads and writes (the
        arrays are kept alive with them, so their ids stay theirs)."""
        if len(self._work) > 64:
            self._work.clear()
        w = self._work[wkey] = (x, out, work)
        return w

    def _rs_work(self, x, out, xloc, ckey, ranges):
        """(destination view, source views) per range, for these x and out."""
        dt, r = x.dtype, self.rank
        plan = self._cached(("rs", x.size, dt, ckey, self._key), lambda: self._rs_plan(x.size, dt, ranges))
        xf, of, work = _flat(x), _flat(out), []
        for sl, srcs, o, c in plan:
            dst = of[sl]
            if xloc is None:  # staged: our own input read in place (the stage copy is the peers')
                own = xf[o:o + c]
                if self.size == 2 or not np.shares_memory(own, dst):
                    srcs = srcs[:]
                    srcs[r] = own
            work.append((dst, srcs))
        return work

    def _rs_plan(self, count, dt, ranges):
        views = [self._src(q, count, dt) for q in range(self.size)]
        plan, at = [], 0
        for o, c in ranges[self.rank]:
            plan.append((slice(at, at + c), [v[o:o + c] for v in views], o, c))
            at += c
        return plan

    def broadcast(self, ctx, hdr, x, out, root, xloc):
        sig = self.sig
        base = self._start(ctx, hdr, x, xloc, x.nbytes, root=root, kind="broadcast")
        if self.via_ring:
            return self._by_ring(ctx, base, "broadcast", x, out, root, None)
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
        if self._resume is not None:  # a C program stopped (fast.py): raise what it found
            return self._resumed(ctx)
        base = self.sig.post(hdr)
        self.sig.wait_all(ctx, base + READY, "entered the barrier")
        self.sig.check(ctx)

    def _resumed(self, ctx) -> int:  # where this call's C program stopped (fast.resumed)
        r, self._resume = self._resume, None
        return resumed(self.sig, ctx, r)
