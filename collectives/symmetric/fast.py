"""The direct path's repeated small calls as programs run in C (csrc/fastpath.c).

A call repeated on the same arrays (a plan hit, plan.py) takes the same steps
every time. After the Python path has run a plan's call once, ``build`` writes
those steps down as a program: the stage copy, the header post, every wait,
header check, reduction and copy, with every address resolved (the arrays'
own, the peers' heap and stage views, the control slots), one program per
epoch parity (headers and stage halves alternate by call). ``Program.run``
executes it in one C call instead of some forty Python ones: a 1 KiB
all-reduce on two ranks costs about half as much (docs/symmetric.md).

The program does what signals.py and direct.py do, flag for flag, so ranks
running programs and ranks running Python interoperate. What the program
cannot know in advance it checks: that every peer posted the locations it was
written for (else the Python path goes on after the header check,
``Direct._resumed``), and that the stage window was not regrown (else the call
runs in Python and the program is rewritten). A header mismatch or a peer that
never arrives is raised by the Python path from the same slots, with the same
messages.

Programs cover, on one node with no tracer: all-reduce (the one-phase kind),
reduce-scatter and all-gather of up to ``MAX_BYTES``, and
the barrier; float32/64 with sum and prod, int32/64 with sum, prod, max and
min (numpy's float max/min treat signed zeros in ways a C comparison does not
reproduce; half types accumulate in float32 in Python). Everything else, and
everything when the extension was not built or ``COLLECTIVES_FAST=0``, runs
in Python.
"""
from __future__ import annotations

import ctypes
import os
import time

import numpy as np

from ..agree import NF
from .allreduce import ONE_PHASE_2_BYTES, SMALL_BYTES, STAGE_DST, _flat
from .signals import AREA, DONE, INPUT, READY
from .stage import ranges_of

try:
    from .. import _fastpath as _c
except ImportError:  # built without a C compiler: the Python path does everything
    _c = None

ENABLED = _c is not None and os.environ.get("COLLECTIVES_FAST", "") != "0"
MAX_BYTES = 256 * 1024  # larger calls: the Python steps cost little next to the data
MAX_REBUILDS = 4  # peers keep changing their arrays under one plan: stay in Python
STEPS = ("header posted", "input staged", "done reading")  # what a WAIT waits for (timeouts name it)
_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2, np.dtype(np.int64): 3}
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class Program:
    """One call shape's steps for both epoch parities, and what they rely on.

    Attributes:
      words: the two programs (int64 arrays), by epoch parity.
      stage: the stage window the programs read and write (None: none).
      keep: objects whose memory the programs address (the header's buffer).
      runs: calls that ran to the end in C (tests check the path is taken).
    """

    __slots__ = ("words", "addrs", "stage", "keep", "runs", "rebuilds", "direct", "sig")

    def __init__(self, direct, words, stage, keep, rebuilds):
        self.words = [np.array(w, dtype=np.int64) for w in words]
        self.addrs = [_addr(w) for w in self.words]
        self.direct, self.sig, self.stage, self.keep = direct, direct.sig, stage, keep
        self.runs, self.rebuilds = 0, rebuilds

    def run(self, comm, p, seq: int, xa, oa):
        """Call ``seq`` of plan ``p``: in C, or handed to the Python path where the
        program stops (see the module's docstring). Returns the caller's out."""
        d = self.direct
        if self.stage is not None and d._stage is not self.stage:
            p.fast = 0  # the stage window was regrown: write the program again after this call
            return comm._execute(p, seq, xa, oa, None)
        sig = self.sig
        e = sig.epoch + 1
        sig.epoch = e
        p.hdr.stamp(seq)
        try:
            rc = _c.run(self.addrs[e & 1], 8 * e, time.monotonic() + comm.timeout, sig.spin)
        except BaseException as err:  # interrupted inside a wait: peers may be mid-call
            comm._broken = err
            raise
        if rc == 0:
            self.runs += 1
            return oa.obj if oa is not None else None
        d._resume = (8 * e, rc, self.words[e & 1])
        if rc == _c.RC_CHANGED:  # peers passed other arrays: rewrite after this call, a few times
            p.fast = 0 if self.rebuilds < MAX_REBUILDS else None
            p.fast_rebuilds = self.rebuilds + 1
        return comm._execute(p, seq, xa, oa, None)


def resumed(sig, ctx, resume) -> int:
    """Where a program stopped, as the Python path sees it: raise its mismatch or
    timeout from the slots, or return the call's flag base (peers' locations
    changed: the header check has passed, the call goes on in Python)."""
    base, rc, words = resume
    if rc == _c.RC_MISMATCH:
        sig._mismatch(ctx)
    if rc > 0:
        _, _, phase, q, step = (int(v) for v in words[rc - 1:rc + 4])
        sig._timeout(ctx, q, base + phase, STEPS[step])
    return base


def build(comm, p, xa, oa):
    """The Program for plan ``p`` (whose call has just run in Python on these
    arrays, so the slots hold every peer's locations), or None where the plan is
    not one programs cover."""
    sym = comm._symmetric
    if not ENABLED or sym is None or sym.hier is not None or comm.tracer is not None:
        return None
    d, kind = sym.direct, p.kind
    if kind == "barrier":
        return _barrier(d, p.hdr)
    x, out = _host_flat(xa), _host_flat(oa)
    if x.dtype not in _DTYPES or max(x.nbytes, out.nbytes) > MAX_BYTES:
        return None
    w = _Writer(d, p.hdr)
    if kind == "all_reduce":
        op, xloc, oloc = p.args
        ok = _all_reduce(w, d, x, out, op, xloc, oloc)
    elif kind == "reduce_scatter":
        op, counts, xloc = p.args
        ok = _reduce_scatter(w, d, x, out, op, counts, xloc)
    elif kind == "all_gather":
        counts, xloc = p.args
        ok = _all_gather(w, d, x, out, counts, xloc)
    else:
        return None
    if not ok:
        return None
    # (the caller's arrays are not kept: a plan hit means they live, unchanged, where they were)
    return Program(d, w.words, w.stage, w.keep, p.fast_rebuilds)


def _host_flat(a):
    return _flat(a.obj if type(a.obj) is np.ndarray else a.flat)


def _barrier(d, hdr):
    w = _Writer(d, hdr)
    for par in (0, 1):
        w.post(par, (-1, -1), (-1, -1), READY)
        w.wait_peers(READY, 0)
        w.hcheck(par)
        w.end()
    return Program(d, w.words, None, w.keep, 0)


class _Writer:
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
        self.cur += [_c.REDUCE, _DTYPES[dst.dtype], _OPS[op], _addr(dst), dst.size, len(srcs),
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

    def start(self, par, x, xloc, dst, stage_bytes, kind) -> bool:
        """Direct._start's steps for a call whose every input is where it was; False
        where this call would take another road (the ring, a stage window to grow)."""
        d, staged = self.d, any(s[0] < 0 for s in self.src)
        if staged:
            if d.stage_max is not None and stage_bytes > d.stage_max[kind]:
                return False  # the ring over MPI
            need = 2 * ((stage_bytes + 63) // 64 * 64)
            if d._stage is None or d._stage.nbytes < need:
                return False
            self.stage = d._stage
        if xloc is None:  # our input staged, copied in before posting (the window is large enough)
            self.copy(d._staged_view(self.rank, par, x.nbytes).view(x.dtype), x)
        self.post(par, xloc if xloc is not None else (-1, -1), dst, INPUT)
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


def _all_reduce(w, d, x, out, op, xloc, oloc) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not _reducible(dt, op):
        return False
    staged = any(s[0] < 0 for s in w.src)
    in_place = any(s[0] == t[0] >= 0 and abs(s[1] - t[1]) < x.nbytes for s, t in zip(w.src, w.dst))
    if not (x.nbytes <= SMALL_BYTES or (n == 2 and (staged or (x.nbytes <= ONE_PHASE_2_BYTES and not in_place)))):
        return False  # two phases
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


def _reduce_scatter(w, d, x, out, op, counts, xloc) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not _reducible(dt, op):
        return False
    (o, c), = ranges_of(counts)[r]
    for par in (0, 1):
        if not w.start(par, x, xloc, (-1, -1), x.nbytes, "reduce_scatter"):
            return False
        dst = out[:c]
        srcs = [w.src_view(q, par, x.size, dt)[o:o + c] for q in range(n)]
        if xloc is None and (n == 2 or not np.shares_memory(x[o:o + c], dst)):
            srcs[r] = x[o:o + c]
        w.reduce(op, dst, srcs)
        w.finish(xloc)
    return True


def _all_gather(w, d, x, out, counts, xloc) -> bool:
    r, dt = d.rank, x.dtype
    for par in (0, 1):
        if not w.start(par, x, xloc, (-1, -1), max(counts) * dt.itemsize, "all_gather"):
            return False
        for q, ((o, c),) in enumerate(ranges_of(counts)):
            src = w.src_view(q, par, c, dt)
            if q == r and xloc is None:
                src = x[:c]
                if np.shares_memory(src, out):
                    continue  # in place: already there
            w.copy(out[o:o + c], src)
        w.finish(xloc)
    return True
