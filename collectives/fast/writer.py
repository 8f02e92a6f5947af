"""Writing a call's C program (see program.py): the op words, one collective at a time.

``Writer`` appends ops (csrc/fastpath.c names them) for one epoch parity at a
time; ``all_reduce``, ``reduce_scatter`` and ``all_gather`` write a call's two
programs the way the direct roads run it (symmetric/allreduce.py, gather.py,
scatter.py) on the road the Python call took, or say False where a program
cannot cover that call (``broadcast`` too). program.py's ``relocations`` lists the
words that address the call's own x and out, so that csrc/lane.c can run the same
programs for arrays of the same shape elsewhere in memory.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..roads import Road
from ..safety.agree import NF
from ..symmetric import stage
from ..symmetric.cma import address
from ..symmetric.signals import AREA, CMA_WIN, DONE, INPUT, PRIVATE, READY, STAGE_WIN
from .codes import C, DTYPES, OPS, c_reduces, streams


class Writer:
    """Writes a call's two programs (one per epoch parity) op by op."""

    def __init__(self, d, hdr):
        self.d, self.sig = d, d.sig
        self.rank, self.size = d.rank, d.size
        self.others = self.sig.others
        self.slot = [address(s) for s in self.sig.slots]
        self.buf = (ctypes.c_char * len(hdr.wire)).from_buffer(hdr.wire)  # the header, stamped per call
        self.keep = [self.buf]
        self.words, self.cur, self.stage = [], [], None
        # the locations every rank posted in the call that just ran (the programs expect them again)
        self.src = [self.sig.loc(q, 0) for q in range(self.size)]
        self.dst = [self.sig.loc(q, 1) for q in range(self.size)]

    def area(self, q, par):
        return self.slot[q] + 8 * (8 + par * AREA)

    def post(self, par, src, dst, phase):
        self.cur += [C.POST, self.area(self.rank, par), ctypes.addressof(self.buf), NF, *src, *dst,
                     self.slot[self.rank], phase]

    def wait_peers(self, phase):
        for q in self.others:
            self.cur += [C.WAIT, self.slot[q], phase, q, phase]

    def hcheck(self, par):
        for q in self.others:
            self.cur += [C.HCHECK, self.area(self.rank, par), self.area(q, par), NF]

    def lcheck(self, par):
        for q in self.others:  # a peer's input read in place may be anywhere in its memory, call to call
            src = (CMA_WIN, C.ANY) if self.src[q][0] == CMA_WIN else self.src[q]
            self.cur += [C.LCHECK, self.area(q, par) + 8 * NF, *src, *self.dst[q]]

    def copy(self, dst, src, into_out=False):
        """A COPY; into the caller's out (``into_out``), which no peer reads, from the
        tuning's stream_min_bytes a STREAM (streaming stores, csrc/wait.c)."""
        if dst.nbytes:
            op = C.STREAM if into_out and streams(dst.nbytes, self.d.tuning.stream_min_bytes) else C.COPY
            self.cur += [op, address(dst), address(src), dst.nbytes]

    def reduce(self, op, dst, srcs, into_out=False):
        """A REDUCE; into the caller's out (``into_out``) from stream_min_bytes an SREDUCE."""
        if len(srcs) == 1:  # one rank: the C loop combines at least two
            return self.copy(dst, srcs[0], into_out)
        code = C.SREDUCE if into_out and streams(dst.nbytes, self.d.tuning.stream_min_bytes) else C.REDUCE
        self.cur += [code, DTYPES[dst.dtype], OPS[op], address(dst), dst.size, len(srcs),
                     *(address(s) for s in srcs)]

    def end(self):
        self.words.append(self.cur + [C.END])
        self.cur = []

    def src_view(self, q, par, count, dt):
        """Node rank q's input as this rank reads it in a call of parity ``par``."""
        loc = self.src[q]
        if loc[0] < 0:
            return self.d.staged_view(q, par, count * dt.itemsize).view(dt)
        return self.d.heap.peer_view(q, loc, count, dt)

    def start(self, par, x, xloc, dst, stage_bytes, parts=None) -> bool:
        """Direct.start's steps for a call whose every input is where it was; False
        where a stage window would have to grow. ``parts``: the (offset, count) ranges
        of x peers read, copied in alone (stage.py)."""
        d, staged = self.d, any(s[0] == PRIVATE for s in self.src)
        offered = self.src[self.rank][0] == CMA_WIN  # our input read in place by peers (cma.py)
        if staged:
            need = 2 * ((stage_bytes + 63) // 64 * 64)
            if d.stage_window is None or d.stage_window.nbytes < need:
                return False
            self.stage = d.stage_window
        if xloc is None and not offered:  # our input staged, copied in before posting (the window is large enough)
            into = d.staged_view(self.rank, par, x.nbytes).view(x.dtype)
            for o, c in parts or ((0, x.size),):
                self.copy(into[o:o + c], x[o:o + c])
        self.post(par, xloc if xloc is not None else self.src[self.rank] if offered else (PRIVATE, PRIVATE), dst,
                  INPUT)
        self.wait_peers(READY)
        self.hcheck(par)
        self.lcheck(par)
        if staged:
            self.wait_peers(INPUT)
        return True

    def finish(self, xloc, then=None):
        """Done reading; wait for the peers when they read our input; ``then``: a
        (dst, src) copy once they are done."""
        self.cur += [C.RAISE, self.slot[self.rank], DONE]
        if xloc is not None:
            self.wait_peers(DONE)
        if then is not None:
            self.copy(*then)
        self.end()


def all_reduce(w, d, x, out, op, xloc, oloc, road) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not c_reduces(dt, op):
        return False
    if road is Road.PUSH:
        return _push(w, d, x, out, op, xloc, oloc)
    if road is not Road.ONE_PHASE:
        return False  # the pull stays in Python
    # out overlaps our heap input, which peers read: reduced aside, copied once every peer is done
    aside = xloc is not None and oloc is not None and oloc[0] == xloc[0] and abs(oloc[1] - xloc[1]) < x.nbytes
    tmp = np.empty_like(x) if aside else None
    dst = oloc if oloc is not None else (STAGE_WIN, 0) if xloc is None else (PRIVATE, PRIVATE)
    if tuple(w.dst[r]) != tuple(dst):
        return False
    for par in (0, 1):
        if not w.start(par, x, xloc, dst, x.nbytes):
            return False
        srcs = [w.src_view(q, par, x.size, dt) for q in range(n)]
        if xloc is None and (n == 2 or not np.shares_memory(x, out)):
            srcs[r] = x
        w.reduce(op, tmp if aside else out, srcs, into_out=not aside)
        if aside:
            w.keep.append(tmp)
            w.finish(xloc, then=(out, tmp))
        else:
            w.finish(xloc)
    return True


def reduce_scatter(w, d, x, out, op, counts, xloc) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not c_reduces(dt, op):
        return False
    (o, c), = stage.ranges_of(counts)[r]
    for par in (0, 1):
        parts = stage.rs_parts(d, x, out, xloc, counts, None, tuple(counts))  # staged: only what peers read
        if not w.start(par, x, xloc, (PRIVATE, PRIVATE), x.nbytes, parts):
            return False
        dst = out[:c]
        srcs = [w.src_view(q, par, x.size, dt)[o:o + c] for q in range(n)]
        if xloc is None and (n == 2 or not np.shares_memory(x[o:o + c], dst)):
            srcs[r] = x[o:o + c]
        w.reduce(op, dst, srcs, into_out=True)
        w.finish(xloc)
    return True


def all_gather(w, d, x, out, counts, xloc, oloc, road) -> bool:
    """Peers' pieces first (views, or read in place with process_vm_readv), then done
    reading, then our own piece's copy, then the wait when peers read our input: the
    order of the direct all-gather. The push writes the Python plan's own chunks,
    the same in both epoch parities."""
    r, dt = d.rank, x.dtype
    offered = w.src[r][0] == CMA_WIN
    if offered and d.pids is None:
        return False
    dst = oloc if oloc is not None else (PRIVATE, PRIVATE)
    if tuple(w.dst[r]) != tuple(dst):
        return False
    push = d.all_gather_.push_plan(x.size, dt, counts) if road is Road.PUSH else None
    for par in (0, 1):
        if not w.start(par, x, xloc, dst, max(counts) * dt.itemsize):
            return False
        if push is not None:
            for src, dsts in push:
                for t in dsts:
                    w.copy(t, src)
                    src = t
            w.finish(0)
            continue
        own = None
        for q, ((o, c),) in enumerate(stage.ranges_of(counts)):
            if q == r:
                own = (out[o:o + c], x[:c] if xloc is None else w.src_view(q, par, c, dt))
            elif w.src[q][0] == CMA_WIN:  # at the address q posts in this call's header area
                w.cur += [C.CMAREAD, d.pids[q], w.area(q, par) + 8 * (NF + 1), 0, address(out[o:o + c]),
                          c * dt.itemsize]
            else:
                w.copy(out[o:o + c], w.src_view(q, par, c, dt), into_out=True)
        w.cur += [C.RAISE, w.slot[r], DONE]
        if own is not None and not np.shares_memory(own[1], out):  # in place: already there
            w.copy(*own, into_out=True)
        if xloc is not None or offered:
            w.wait_peers(DONE)
        w.end()
    if push is not None:
        w.keep.append(push)
    return True


def broadcast(w, d, x, out, root, xloc) -> bool:
    """Direct.broadcast's steps: the root stages its input, posts its heap array or offers x
    in place, and copies it into its out; every other rank copies (or reads) it into its out."""
    r = d.rank
    staged = w.src[root][0] == PRIVATE
    offered = w.src[root][0] == CMA_WIN  # the root's private input read in place (cma.py)
    if offered and d.pids is None:
        return False
    if staged:
        need = 2 * ((x.nbytes + 63) // 64 * 64)
        if d.stage_window is None or d.stage_window.nbytes < need:
            return False
        w.stage = d.stage_window
    for par in (0, 1):
        mine = xloc if xloc is not None else w.src[r] if r == root and offered else (PRIVATE, PRIVATE)
        if r == root and xloc is None and not offered:  # our input into the stage half of this call, before posting
            w.copy(d.staged_view(r, par, x.nbytes).view(x.dtype), x)
        w.post(par, mine, (PRIVATE, PRIVATE), INPUT if r == root or xloc is not None else READY)
        w.wait_peers(READY)
        w.hcheck(par)
        w.lcheck(par)
        if r == root:
            if address(out) != address(x):
                w.copy(out, x, into_out=True)
            w.cur += [C.RAISE, w.slot[r], DONE]
            if xloc is not None or offered:  # peers read our heap input, or x in place: wait until they are done
                w.wait_peers(DONE)
        else:
            if staged:
                w.cur += [C.WAIT, w.slot[root], INPUT, root, INPUT]
            if offered:  # at the address the root posts in this call's header area
                w.cur += [C.CMAREAD, d.pids[root], w.area(root, par) + 8 * (NF + 1), 0, address(out), x.nbytes]
            else:
                w.copy(out, w.src_view(root, par, x.size, x.dtype), into_out=True)
            w.cur += [C.RAISE, w.slot[r], DONE]
        w.end()
    return True


def _push(w, d, x, out, op, xloc, oloc) -> bool:
    """The pushed all-reduce (every destination in the heap, no input staged): reduce a
    chunk, write it into every destination, done; the chunks are the Python plan's own
    views, the same in both epoch parities when nothing is staged."""
    if oloc is None or xloc is None or any(s[0] < 0 for s in w.src) or tuple(w.dst[d.rank]) != tuple(oloc):
        return False
    chunks = d.all_reduce_.plan(out, x.size, x.dtype, tuple(w.dst), None).chunks  # a Pushed (d.road is PUSH)
    for par in (0, 1):
        if not w.start(par, x, xloc, oloc, x.nbytes):
            return False
        for dst, srcs, pushes in chunks:
            w.reduce(op, dst, srcs)
            for p in pushes:
                w.copy(p, dst)
        w.finish(xloc)
    w.keep.append(chunks)
    return True
