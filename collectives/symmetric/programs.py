"""Writing a call's C program (see fast.py): the op words, one collective at a time.

``Writer`` appends ops (csrc/fastpath.c names them) for one epoch parity at a
time; ``all_reduce``, ``reduce_scatter`` and ``all_gather`` write a call's two
programs the way Direct runs it (direct.py, allreduce.py, gather.py), or say
False where that call would take another road.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .. import _fastpath as _c  # only imported once fast.py found the extension
from ..agree import NF
from .allreduce import STAGE_DST, one_phase, one_phase_2, pushable
from .cma import CMA_WIN
from .cma import address as _addr
from .signals import AREA, DONE, INPUT, READY
from .stage import ranges_of

DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2, np.dtype(np.int64): 3}
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}


class Writer:
    """Writes a call's two programs (one per epoch parity) op by op."""

    def __init__(self, d, hdr):
        self.d, self.sig = d, d.sig
        self.rank, self.size = d.rank, d.size
        self.others = self.sig.others
        self.slot = [_addr(s) for s in self.sig.slots]
        self.buf = (ctypes.c_char * len(hdr.wire)).from_buffer(hdr.wire)  # the header, stamped per call
        self.keep = [self.buf]
        self.words, self.cur, self.stage = [], [], None
        # the locations every rank posted in the call that just ran (the programs expect them again)
        self.src = [self.sig.loc(q, 0) for q in range(self.size)]
        self.dst = [self.sig.loc(q, 1) for q in range(self.size)]

    def area(self, q, par):
        return self.slot[q] + 8 * (8 + par * AREA)

    def post(self, par, src, dst, phase):
        self.cur += [_c.POST, self.area(self.rank, par), ctypes.addressof(self.buf), NF, *src, *dst,
                     self.slot[self.rank], phase]

    def wait_peers(self, phase, step):
        for q in self.others:
            self.cur += [_c.WAIT, self.slot[q], phase, q, step]

    def hcheck(self, par):
        for q in self.others:
            self.cur += [_c.HCHECK, self.area(self.rank, par), self.area(q, par), NF]

    def lcheck(self, par):
        for q in self.others:
            self.cur += [_c.LCHECK, self.area(q, par) + 8 * NF, *self.src[q], *self.dst[q]]

    def copy(self, dst, src):
        if dst.nbytes:
            self.cur += [_c.COPY, _addr(dst), _addr(src), dst.nbytes]

    def reduce(self, op, dst, srcs):
        if len(srcs) == 1:  # one rank: the C loop combines at least two
            return self.copy(dst, srcs[0])
        self.cur += [_c.REDUCE, DTYPES[dst.dtype], _OPS[op], _addr(dst), dst.size, len(srcs),
                     *(_addr(s) for s in srcs)]

    def end(self):
        self.words.append(self.cur + [_c.END])
        self.cur = []

    def src_view(self, q, par, count, dt):
        """Node rank q's input as this rank reads it in a call of parity ``par``."""
        loc = self.src[q]
        if loc[0] < 0:
            return self.d._staged_view(q, par, count * dt.itemsize).view(dt)
        return self.d.heap.peer_view(q, loc, count, dt)

    def start(self, par, x, xloc, dst, stage_bytes, kind, parts=None) -> bool:
        """Direct._start's steps for a call whose every input is where it was; False
        where this call would take another road (the ring, a stage window to grow).
        ``parts``: the (offset, count) ranges of x peers read, copied in alone (stage.py)."""
        d, staged = self.d, any(s[0] == -1 for s in self.src)
        offered = self.src[self.rank][0] == CMA_WIN  # our input read in place by peers (cma.py)
        if kind != "all_gather" and any(s[0] == CMA_WIN for s in self.src):
            return False  # only all-gathers offer inputs in place (cma.py)
        if staged:
            if d.stage_max is not None and stage_bytes > d.stage_max[kind]:
                return False  # the ring over MPI
            need = 2 * ((stage_bytes + 63) // 64 * 64)
            if d._stage is None or d._stage.nbytes < need:
                return False
            self.stage = d._stage
        if xloc is None and not offered:  # our input staged, copied in before posting (the window is large enough)
            stage = d._staged_view(self.rank, par, x.nbytes).view(x.dtype)
            for o, c in parts or ((0, x.size),):
                self.copy(stage[o:o + c], x[o:o + c])
        self.post(par, xloc if xloc is not None else self.src[self.rank] if offered else (-1, -1), dst, INPUT)
        self.wait_peers(READY, 0)
        self.hcheck(par)
        self.lcheck(par)
        if staged:
            self.wait_peers(INPUT, 1)
        return True

    def finish(self, xloc, then=None):
        """Done reading; wait for the peers when they read our input; ``then``: a
        (dst, src) copy once they are done."""
        self.cur += [_c.RAISE, self.slot[self.rank], DONE]
        if xloc is not None:
            self.wait_peers(DONE, 2)
        if then is not None:
            self.copy(*then)
        self.end()


def _reducible(dt, op) -> bool:
    return op in _OPS and (op in ("sum", "prod") or dt.kind == "i")


def all_reduce(w, d, x, out, op, xloc, oloc) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not _reducible(dt, op):
        return False
    staged = any(s[0] == -1 for s in w.src)
    if staged and d._piped("all_reduce", x.nbytes, dt, op):
        return False  # the pipe (pipe.py): one C call already
    if not one_phase(n, x.nbytes, staged, lambda nbytes: not one_phase_2(w.src, w.dst, nbytes)):
        return _ar_push(w, d, x, out, op, xloc, oloc)  # two phases
    # out overlaps our heap input, which peers read: reduced aside, copied once every peer is done
    aside = xloc is not None and oloc is not None and oloc[0] == xloc[0] and abs(oloc[1] - xloc[1]) < x.nbytes
    tmp = np.empty_like(x) if aside else None
    dst = oloc if oloc is not None else (STAGE_DST, 0) if xloc is None else (-1, -1)
    if tuple(w.dst[r]) != tuple(dst):
        return False
    for par in (0, 1):
        if not w.start(par, x, xloc, dst, x.nbytes, "all_reduce"):
            return False
        srcs = [w.src_view(q, par, x.size, dt) for q in range(n)]
        if xloc is None and (n == 2 or not np.shares_memory(x, out)):
            srcs[r] = x
        w.reduce(op, tmp if aside else out, srcs)
        if aside:
            w.keep.append(tmp)
            w.finish(xloc, then=(out, tmp))
        else:
            w.finish(xloc)
    return True


def reduce_scatter(w, d, x, out, op, counts, xloc) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not _reducible(dt, op):
        return False
    (o, c), = ranges_of(counts)[r]
    for par in (0, 1):
        parts = d._rs_parts(x, out, xloc, counts, None, tuple(counts))  # staged: only what peers read
        if not w.start(par, x, xloc, (-1, -1), x.nbytes, "reduce_scatter", parts):
            return False
        dst = out[:c]
        srcs = [w.src_view(q, par, x.size, dt)[o:o + c] for q in range(n)]
        if xloc is None and (n == 2 or not np.shares_memory(x[o:o + c], dst)):
            srcs[r] = x[o:o + c]
        w.reduce(op, dst, srcs)
        w.finish(xloc)
    return True


def all_gather(w, d, x, out, counts, xloc, oloc) -> bool:
    """Peers' pieces first (views, or read in place with process_vm_readv), then done
    reading, then our own piece's copy, then the wait when peers read our input: the
    order of Direct.all_gather. The push (every input and out in the heap) writes
    the Python plan's own chunks, the same in both epoch parities."""
    r, dt = d.rank, x.dtype
    offered = w.src[r][0] == CMA_WIN
    if offered and d.pids is None:
        return False
    dst = oloc if oloc is not None else (-1, -1)
    if tuple(w.dst[r]) != tuple(dst) or (any(s[0] == -1 for s in w.src) and d._piped("all_gather", out.nbytes, dt)):
        return False  # (staged and large: the pipe, pipe.py, one C call already)
    push = d._ag_push_plan(x.size, dt, tuple(counts)) if dst[0] >= 0 else None
    for par in (0, 1):
        if not w.start(par, x, xloc, dst, max(counts) * dt.itemsize, "all_gather"):
            return False
        if push is not None:
            for src, dsts in push:
                for t in dsts:
                    w.copy(t, src)
                    src = t
            w.finish(0)
            continue
        own = None
        for q, ((o, c),) in enumerate(ranges_of(counts)):
            if q == r:
                own = (out[o:o + c], x[:c] if xloc is None else w.src_view(q, par, c, dt))
            elif w.src[q][0] == CMA_WIN:
                w.cur += [_c.CMAREAD, d.pids[q], w.src[q][1], _addr(out[o:o + c]), c * dt.itemsize]
            else:
                w.copy(out[o:o + c], w.src_view(q, par, c, dt))
        w.cur += [_c.RAISE, w.slot[r], DONE]
        if own is not None and not np.shares_memory(own[1], out):  # in place: already there
            w.copy(*own)
        if xloc is not None or offered:
            w.wait_peers(DONE, 2)
        w.end()
    if push is not None:
        w.keep.append(push)
    return True


def _ar_push(w, d, x, out, op, xloc, oloc) -> bool:
    """The two-phase all-reduce where every destination is in the heap and no input
    is staged (allreduce.py's push: reduce a chunk, write it into every
    destination, done): the chunks are the Python plan's own views, which are the
    same in both epoch parities when nothing is staged."""
    if oloc is None or xloc is None or any(s[0] < 0 for s in w.src) or tuple(w.dst[d.rank]) != tuple(oloc) \
            or not pushable(w.src, w.dst, x.nbytes):  # some destination private: the pull, in Python
        return False
    chunks = d._ar_plan(out, x.size, x.dtype, tuple(w.dst), None).chunks  # a Pushed (pushable above)
    for par in (0, 1):
        if not w.start(par, x, xloc, oloc, x.nbytes, "all_reduce"):
            return False
        for dst, srcs, pushes in chunks:
            w.reduce(op, dst, srcs)
            for p in pushes:
                w.copy(p, dst)
        w.finish(xloc)
    w.keep.append(chunks)
    return True
