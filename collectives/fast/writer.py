"""Writing a call's C program (see program.py): the op words.

``Writer`` appends ops (csrc/fastpath.c names them) for one epoch parity at a
time: the header post, waits, checks, copies, reductions and the steps every
direct call starts and ends with. calls.py writes each collective's two
programs with it. program.py's ``relocations`` lists the words that address the
call's own x and out, so that csrc/lane.c can run the same programs for arrays
of the same shape elsewhere in memory.
"""
from __future__ import annotations

import ctypes

from ..safety.agree import NF
from ..symmetric.cma import address
from ..symmetric.signals import AREA, CMA_WIN, DONE, INPUT, PRIVATE, READY
from .codes import C, DTYPES, OPS, streams


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
            dst = (CMA_WIN, C.ANY) if self.dst[q][0] == CMA_WIN else self.dst[q]
            self.cur += [C.LCHECK, self.area(q, par) + 8 * NF, *src, *dst]

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
