"""Direct collectives within a node: every rank reads (or writes) its peers' buffers in place.

``Direct`` holds what every direct road shares: the heap, the control slots,
the stage window, the steps of a call (``start``: post the header and where
this rank's buffers live, wait for every peer, compare headers, stage an
ordinary input; ``finish``: done, and wait for the peers that read ours), and
the caches of views bound to the caller's arrays. Each collective is a
collaborator with the Direct passed in: allreduce.py, gather.py, scatter.py
(reduce-scatter), and below, broadcast and barrier. Which road a call takes
among direct, one-phase, push, staged-ring and pipe is roads.choose's, asked
once the headers are posted (``road``); by_ring.py and pipe.py run the two
that leave the direct algorithms.

Each element is read once from each rank and written once. Before returning, every rank
waits until every peer says it is done reading (the caller may overwrite its buffers as
soon as we return), unless peers read only its stage copy (``finish``). Ordinary arrays
are staged (stage.py, one half of the stage window per call) or read in place (cma.py).
"""
from __future__ import annotations

import numpy as np

from .. import roads
from ..dtypes import HALF, to_dtype
from ..fast.codes import copy_out
from ..kernels import NUMPY_KERNELS
from ..kernels.numpy_kernels import UFUNCS
from ..roads import Facts, Road
from . import stage
from .allreduce import AllReduce, flat
from .by_ring import by_ring
from .cma import Remote, address, cma_read, offers
from .gather import AllGather
from .pipe import by_pipe
from .scatter import ReduceScatter
from .signals import CMA_WIN, DONE, INPUT, PRIVATE, READY

_F32 = np.dtype(np.float32)
_HALF = frozenset(to_dtype(h) for h in HALF)
_UFUNCS = {**UFUNCS, "avg": np.add}


class Direct:
    """The direct roads over one node's heap and control slots.

    Args:
      heap: the node's Heap.
      signals: the node's Signals.
      tuning: the communicator's Tuning.
      forced: {collective: Road} forced for every call (roads.parse), or empty.
      auto: staging limits apply (the tuning's stage is "auto").
    """

    def __init__(self, heap, signals, tuning, forced=None):
        self.heap, self.sig, self.tuning = heap, signals, tuning
        self.rank, self.size = heap.rank, heap.size
        self.forced = dict(forced or {})
        self.plans: dict = {}  # views and decisions per call shape and posted locations
        self._work: dict = {}  # views bound to the caller's arrays (see bind)
        self._tmp: dict = {}
        self.stage_window = None  # grows with the sizes staged (heap scratch "stage")
        self.key = None  # every rank's posted locations this call (a cache key)
        self.staged = False  # this call: some rank's input is staged
        self.offered = False  # this call: our input was offered to peers in place (cma.py)
        self.road = Road.DIRECT  # the road this call took
        self.stop = None  # (base, what, q, phase): where this call's C program stopped (fast/program.py)
        self.pids = None  # the node's pids, where every rank may read the others' memory (cma.py)
        self.all_reduce_ = AllReduce(self)
        self.all_gather_ = AllGather(self)
        self.reduce_scatter_ = ReduceScatter(self)

    # the collectives (x and out as the caller passed them; loc: where each is in the heap, None: private)
    def all_reduce(self, ctx, hdr, x, out, op, xloc, oloc):
        return self.all_reduce_.run(ctx, hdr, x, out, op, xloc, oloc)

    def all_gather(self, ctx, hdr, x, out, counts, xloc, ranges=None, oloc=None):
        return self.all_gather_.run(ctx, hdr, x, out, counts, xloc, ranges, oloc)

    def reduce_scatter(self, ctx, hdr, x, out, counts, op, xloc, ranges=None):
        return self.reduce_scatter_.run(ctx, hdr, x, out, counts, op, xloc, ranges)

    # ------------------------------------------------------------------ roads
    def if_staged(self, kind, nbytes, piece, dt, op=None) -> Road:
        """The road a staged call of these sizes would take, known before the post (a staged
        input bound for the pipe or the ring is not copied in early); cached per shape."""
        key = ("if staged", kind, nbytes, piece, dt, op)
        v = self.plans.get(key)
        if v is None:
            f = Facts(kind, nbytes, piece, dt, op, world=self.size, direct=True, staged=True, pushable=False,
                      overlap=False)
            forced = self.forced.get(kind)
            v = self.cached(key, lambda: forced if forced is not None else roads.choose(f, self.tuning).road)
        return v

    def leaves(self, kind, nbytes, piece, dt, op=None) -> bool:
        """Whether a staged call of these sizes leaves the direct algorithms (pipe, ring)."""
        return self.if_staged(kind, nbytes, piece, dt, op) in (Road.PIPE, Road.STAGED_RING)

    def choose(self, kind, nbytes, piece, dt, op=None, pushable=False, overlap=False) -> Road:
        """This call's road from the posted facts (cached per shape and posted locations)."""
        key = ("road", kind, nbytes, piece, dt, op, self.key)
        road = self.plans.get(key)
        if road is None:
            f = Facts(kind, nbytes, piece, dt, op, world=self.size, direct=True, staged=self.staged,
                      pushable=pushable() if callable(pushable) else pushable,
                      overlap=overlap() if callable(overlap) else overlap)
            road = self.cached(key, lambda: roads.choose(f, self.tuning, self.forced.get(kind)).road)
        self.road = road
        return road

    # ----------------------------------------------------------------- steps
    def src(self, q, count, dt):
        """Node rank q's input this call: its heap array or its stage copy."""
        loc = self.sig.loc(q, 0)
        if loc[0] < 0:  # staged: in the half of q's stage window that this call uses
            return self.staged_view(q, self.sig.epoch, count * dt.itemsize).view(dt)
        return self.heap.peer_view(q, loc, count, dt)

    def staged_view(self, q, epoch, nbytes):
        """Node rank q's stage bytes for call ``epoch``: the window's two halves
        alternate by call, so a rank may copy its next input in while a slow peer
        still reads the last one (and needs no done-reading wait for it)."""
        w = self.stage_window
        o = (epoch & 1) * (w.nbytes // 2 // 64 * 64)
        return w.peers[q][o:o + nbytes]

    def start(self, ctx, hdr, x, xloc, stage_bytes, dst=(PRIVATE, PRIVATE), root=None, leaves=False, parts=None,
              offer=False) -> int:
        """Post, wait for every header, check; stage an input that is not in the heap.
        A staged input is copied into the stage window before posting when the
        window is already large enough (then every rank's is: they only ever grow
        together, to agreed sizes, and nobody reads it before the check), else
        after the check, once the window has grown, and announced with INPUT.

        Args:
          stage_bytes: what a stage holds (agreed: every rank computes it alike).
          root: a broadcast's root (only its input is read).
          leaves: a staged call would leave the direct algorithms (``leaves``): not copied early.
          parts: the (offset, count) ranges of x that peers read (None: all).
          offer: a private input is offered in place (peers read it with process_vm_readv).

        Returns the call's flag base; ``self.staged`` and ``self.key`` describe every
        rank's posted locations. The caller then asks ``choose``: for the pipe and the
        ring, nothing was staged (when ``leaves``).
        """
        sig = self.sig
        self.offered = offer
        copy = xloc is None and not offer and (root is None or root == self.rank)
        need = 2 * ((stage_bytes + 63) // 64 * 64)  # two halves, each on whole cache lines
        if self.stop is not None:  # a C program posted, waited and checked (fast/program.py)
            stop, self.stop = self.stop, None
            base, early = sig.resumed(ctx, stop), copy
        else:
            if xloc is not None or offer:  # the hot path: our input is in the heap, or read in place
                early = False
                base = sig.post(hdr, xloc if xloc is not None else (CMA_WIN, address(x)), dst, INPUT)
            else:
                # early only when the window will not grow below (the copy would be lost)
                w = self.stage_window
                early = copy and not leaves and w is not None and w.nbytes >= need
                if early:
                    stage.copy_in(self, sig.epoch + 1, x, parts)
                base = sig.post(hdr, (PRIVATE, PRIVATE), dst, INPUT if early else READY)
            sig.wait_all(ctx, base + READY, "header posted")
            sig.check(ctx)
        key = sig.locs_key()
        staged = self.plans.get(("staged", key, root))
        if staged is None:
            staged = self.cached(("staged", key, root), lambda: sig.staging() if root is None
                                 else sig.loc(root, 0)[0] == PRIVATE)
        self.staged = staged  # node-wide: some rank's input is staged this call
        self.key = key
        if not staged or (leaves and staged):
            return base
        self.stage_window = self.heap.scratch(need, "stage")
        if copy and not early:
            stage.copy_in(self, sig.epoch, x, parts)
            sig.raise_to(base + INPUT)
        self.key = (key, self.stage_window.index, sig.epoch & 1)
        if root is None:
            sig.wait_all(ctx, base + INPUT, "input staged")
        elif self.rank != root and sig.slots[root][0] < base + INPUT:
            sig.wait(ctx, root, base + INPUT, "input staged")
        return base

    def finish(self, ctx, base, xloc=0):
        """Done reading peers' buffers; return once every peer is too. A rank whose
        input was staged (``xloc`` None) and whose destination nobody reads need not
        wait: peers read only its stage copy, whose half is not rewritten until
        they have posted the next call (which every call waits for)."""
        sig = self.sig
        sig.flag[0] = base + DONE
        if xloc is not None:
            sig.wait_all(ctx, base + DONE, "done reading")

    def leave(self, ctx, base, kind, x, out, counts, op):
        """Run this call's road when it left the direct algorithms: the pipe or the ring."""
        if self.road is Road.PIPE:
            return by_pipe(self, ctx, base, kind, x, out, counts, op)
        return by_ring(self, ctx, base, kind, x, out, counts, op)

    def reduce(self, op, dst, srcs):
        """dst = op over srcs, in rank order (chunked when more than two are added)."""
        f = _UFUNCS[op]
        if len(srcs) == 1:
            np.copyto(dst, srcs[0])
        elif dst.dtype in _HALF:  # float32 accumulator, rounded once
            step = self.tuning.reduce_chunk_bytes // 4
            for lo in range(0, dst.size, step):
                acc = srcs[0][lo:lo + step].astype(_F32)
                for s in srcs[1:]:
                    f(acc, s[lo:lo + step].astype(_F32), out=acc)
                dst[lo:lo + step] = acc.astype(dst.dtype)
        elif len(srcs) == 2:
            f(srcs[0], srcs[1], out=dst)
        else:
            step = max(1, self.tuning.reduce_chunk_bytes // dst.itemsize)
            for lo in range(0, dst.size, step):
                d = dst[lo:lo + step]
                f(srcs[0][lo:lo + step], srcs[1][lo:lo + step], out=d)
                for s in srcs[2:]:
                    f(d, s[lo:lo + step], out=d)
        if op == "avg":
            NUMPY_KERNELS.scale(dst, self.size)

    def trace(self, ctx, phase, reads, pushed=False):
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

    def cached(self, key, build):
        p = self.plans.get(key)
        if p is None:
            if len(self.plans) > 512:
                self.plans.clear()
            p = self.plans[key] = build()
        return p

    def locs(self, which):
        s = self.sig
        return tuple(s.loc(q, which) for q in range(self.size))  # slow: only when building a plan

    def bind(self, wkey, x, out, build):
        """The views a call on these very arrays reads and writes, remembered with the
        arrays (kept alive with them, so their ids stay theirs)."""
        work = self._work.get(wkey)
        if work is None or work[0] is not x or work[1] is not out:
            if len(self._work) > 64:
                self._work.clear()
            work = self._work[wkey] = (x, out, build())
        return work[2]

    def scratch_array(self, count, dt):
        """A private array of ``count`` elements, kept per shape (a few at most)."""
        tmp = self._tmp.get((count, dt))
        if tmp is None:
            if len(self._tmp) >= 8:  # a caller cycling through sizes: keep memory bounded
                self._tmp.clear()
            tmp = self._tmp[(count, dt)] = np.empty(count, dt)
        return tmp

    # ---------------------------------------------------------- broadcast, barrier
    def broadcast(self, ctx, hdr, x, out, root, xloc):
        """The root's input read from the heap, its stage copy, or (private, from cma_min_bytes)
        in place with process_vm_readv; the root waits for readers of its heap input or x."""
        sig = self.sig
        leaves = self.leaves("broadcast", x.nbytes, x.nbytes, x.dtype)
        offer = self.rank == root and offers(self, "broadcast", x, out, xloc, x.nbytes)
        base = self.start(ctx, hdr, x, xloc, x.nbytes, root=root, leaves=leaves, offer=offer)
        if self.choose("broadcast", x.nbytes, x.nbytes, x.dtype) is not Road.DIRECT:
            return self.leave(ctx, base, "broadcast", x, out, root, None)
        if self.rank == root:
            if out is not x:
                copy_out(flat(out), flat(x), self.tuning.stream_min_bytes)
            self.finish(ctx, base, 0 if offer else xloc)  # staged: peers read the stage copy, not x
        else:
            loc = sig.loc(root, 0)
            if loc[0] == CMA_WIN:
                cma_read(ctx, flat(out), Remote(self.pids[root], loc[1], x.nbytes, sig.world[root]))
            else:
                copy_out(flat(out), self.src(root, x.size, x.dtype), self.tuning.stream_min_bytes)
            if ctx.tracer is not None:
                self.trace(ctx, "direct broadcast", [(root, root, x.nbytes)])
            sig.raise_to(base + DONE)  # the root waits for this; nobody reads ours

    def barrier(self, ctx, hdr):
        self.road = Road.DIRECT
        if self.stop is not None:  # a C program stopped (fast/program.py): raise what it found
            stop, self.stop = self.stop, None
            return self.sig.resumed(ctx, stop)
        base = self.sig.post(hdr)
        self.sig.wait_all(ctx, base + READY, "entered the barrier")
        self.sig.check(ctx)
