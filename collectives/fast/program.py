"""The direct roads' repeated calls as programs run in C (csrc/fastpath.c; writer.py writes them).

A call repeated on the same arrays (a plan hit, plan.py) takes the same steps
every time. After the Python path has run a plan's call once, ``build`` writes
those steps down for the road that call took (direct, one-phase or push; calls.py):
the stage copy, the header post, every wait, header check, reduction and
copy, with every address resolved, one program per epoch parity (headers and
stage halves alternate by call). ``Program.run`` executes it in one C call
instead of some forty Python ones.

The program does what signals.py and the direct roads do, flag for flag, so
ranks running programs and ranks running Python interoperate. What it cannot
know in advance it checks: that every peer posted the locations it was written
for (else the Python path goes on after the header check, from ``Direct.stop``),
and that the stage window was not regrown (else the call runs in Python and the
program is rewritten). A header mismatch or a peer that never arrives is raised
by the Python path from the same slots, with the same messages. A traced
call runs the program too and records what a traced Python run of it recorded
(the first traced call runs in Python when the program was written untraced).

Programs cover, on one node: reductions of up to ``fast_max_bytes``, pushed
all-reduces (no input staged), all-gathers and broadcasts of up to
``fast_max_copy_bytes``, and the barrier, for the dtypes and ops fast/codes.py names.
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import CollectiveError
from ..roads import IN_C, Road
from ..symmetric.cma import address
from ..symmetric.signals import CMA_WIN, READY
from . import calls, lane, writer
from .codes import C

MAX_REBUILDS = 4  # peers keep changing their arrays under one plan: stay in Python
_SKIP = ("action", "rank", "label", "t", "t0", "t1")


class Program:
    """One call shape's steps for both epoch parities, and what they rely on.

    Attributes:
      words: the two programs (int64 arrays), by epoch parity.
      road: the road it runs (the road of the Python call it was written from).
      stage: the stage window the programs read and write (None: none).
      keep: objects whose memory the programs address (the header's buffer).
      trace: what a traced Python run of the call recorded, (action, fields) each, replayed
        when traced; None when it was written untraced (then the first traced call runs in
        Python, and the program keeps what it recorded).
      runs: calls that ran to the end in C (tests check the road is taken).
    """

    __slots__ = ("words", "addrs", "road", "stage", "keep", "trace", "runs", "rebuilds", "direct", "sig", "relocs")

    def __init__(self, direct, w, road, rebuilds, trace):
        self.words = [np.array(x, dtype=np.int64) for x in w.words]
        self.addrs = [address(x) for x in self.words]
        self.direct, self.sig, self.stage, self.keep = direct, direct.sig, w.stage, w.keep
        self.road, self.trace = road, trace
        self.runs, self.rebuilds = 0, rebuilds
        self.relocs = None  # the words addressing the call's own private x and out (relocations, below)

    def run(self, comm, p, seq: int, xa, oa):
        """Call ``seq`` of plan ``p``: in C, or handed to the Python path where the
        program stops (see the module's docstring). Returns the caller's out."""
        d = self.direct
        tracer = comm.tracer
        if tracer is not None and self.trace is None:  # written untraced: nothing to replay yet
            mark = tracer.mark()
            got = comm.execute(p, seq, xa, oa, None)
            if p.program is self and d.road is self.road:
                self.trace = recorded(tracer.since(mark, comm.rank))
            return got
        if self.stage is not None and d.stage_window is not self.stage:
            p.program = None  # the stage window was regrown: write the program again after this call
            return comm.execute(p, seq, xa, oa, None)
        sig = self.sig
        e = sig.epoch + 1
        sig.epoch = e
        p.hdr.stamp(seq)
        spin, yld = sig.policy.times()
        try:
            rc = C.run(self.addrs[e & 1], 8 * e, time.monotonic() + comm.timeout, spin, yld, sig.policy.max_sleep)
        except OSError as err:  # process_vm_readv refused (cma.py): peers time out waiting for us
            comm.broken = err
            raise CollectiveError(f"rank {comm.rank}: {p.kind} #{seq}: {err}") from err
        except BaseException as err:  # interrupted inside a wait: peers may be mid-call
            comm.broken = err
            raise
        if rc == 0:
            self.runs += 1
            d.road = self.road
            if tracer is not None:
                self.replay(tracer, comm.rank, f"{p.kind} #{seq}")
            return oa.obj if oa is not None else None
        d.stop = self.stopped(8 * e, rc, self.words[e & 1])
        if rc == C.RC_CHANGED:  # peers passed other arrays: rewrite after this call, a few times
            p.in_c = self.rebuilds < MAX_REBUILDS
            p.program, p.rebuilds = None, self.rebuilds + 1
            if comm.lane is not None:  # its copies of this program address what the program keeps alive
                lane.spans(comm, comm.lane)
        return comm.execute(p, seq, xa, oa, None)

    @staticmethod
    def stopped(base, rc, words):
        """Where the program stopped, for Signals.resumed: (base, what, node rank, phase)."""
        if rc == C.RC_MISMATCH:
            return base, "mismatch", -1, 0
        if rc > 0:
            _, _, phase, q, _ = (int(v) for v in words[rc - 1:rc + 4])
            return base, "timeout", q, phase
        return base, "changed", -1, 0

    def replay(self, tracer, rank, label):
        tracer.begin(label, rank=rank)
        for action, fields in self.trace:
            tracer.event(action, rank=rank, label=label, **fields)
        tracer.end(label, rank=rank, road=self.road.value)


def recorded(events) -> list:
    """What a program replays of a traced call's ``events``: (action, fields) of each
    but the waits, without what every call has anew (rank, label, times)."""
    return [(e["action"], {k: v for k, v in e.items() if k not in _SKIP}) for e in events if e["action"] != "wait"]


def build(comm, p, xa, oa, events=None):
    """The Program for plan ``p``, whose call has just run in Python on these arrays (so
    the slots hold every peer's locations and ``Direct.road`` the road it took), or
    None where programs do not cover it. ``events``: what that call traced (None: it
    was not traced)."""
    sym = comm.symmetric
    if not comm.tuning.fast or C is None or sym is None or sym.hier is not None:
        return None
    d, kind = sym.direct, p.kind
    road = d.road
    if road not in IN_C:
        return None
    trace = None if events is None else recorded(events)
    w = writer.Writer(d, p.hdr)
    if kind == "barrier":
        for par in (0, 1):
            w.post(par, (-1, -1), (-1, -1), READY)
            w.wait_peers(READY)
            w.hcheck(par)
            w.end()
        return Program(d, w, road, 0, trace)
    x, out = xa.host.reshape(-1), oa.host.reshape(-1)
    t = comm.tuning
    big = kind in ("all_gather", "broadcast") or road is Road.PUSH
    if max(x.nbytes, out.nbytes) > (t.fast_max_copy_bytes if big else t.fast_max_bytes):
        return None
    oloc = None
    if kind == "all_reduce":
        op, xloc, oloc = p.args
        ok = calls.all_reduce(w, d, x, out, op, xloc, oloc, road)
    elif kind == "reduce_scatter":
        op, counts, xloc = p.args
        ok = calls.reduce_scatter(w, d, x, out, op, counts, xloc)
    elif kind == "all_gather":
        counts, xloc, oloc = p.args
        ok = calls.all_gather(w, d, x, out, counts, xloc, oloc, road)
    elif kind == "broadcast":
        root, xloc = p.args
        ok = calls.broadcast(w, d, x, out, root, xloc)
    else:
        return None
    if not ok:
        return None
    # (the caller's arrays are not kept: a plan hit means they live, unchanged, where they were)
    prog = Program(d, w, road, p.rebuilds, trace)
    if xloc is None and oloc is None:  # private arrays: the same steps serve any placement (lane.c)
        prog.relocs = relocations(w.words, ((address(x), x.nbytes), (address(out), out.nbytes)))
    return prog


# words of each op (op code first) and which of them are addresses of the caller's memory
_OPS = None


def _layout():
    global _OPS
    if _OPS is None:
        _OPS = {C.COPY: (4, (1, 2)), C.STREAM: (4, (1, 2)), C.WAIT: (5, ()), C.HCHECK: (4, ()), C.LCHECK: (6, ()),
                C.RAISE: (3, ()), C.CMAREAD: (6, (4,))}
    return _OPS


def steps(words):
    """(word index, op code, the indices of the words that address the caller's memory)
    for every op of one program, in order."""
    ops, at = _layout(), 0
    while words[at] != C.END:
        op = words[at]
        if op == C.POST:
            size = 10  # x's and out's addresses where they are read in place (cma.py)
            addrs = tuple(i + 1 for i in (4, 6) if words[at + i] == CMA_WIN)
        elif op == C.REDUCE or op == C.SREDUCE:
            size = 6 + words[at + 5]
            addrs = (3,) + tuple(range(6, size))
        else:
            size, addrs = ops[op]
        yield at, op, addrs
        at += size


def relocations(programs, ranges) -> np.ndarray:
    """(parity, word index, base, offset) for every word of ``programs`` (one per epoch
    parity) that addresses memory in ``ranges`` ((address, bytes) of x, then of out), as
    int64 rows. An address inside a range belongs to it; one at a range's end (an empty
    view) only where no range holds it: x and out may be neighbours in one buffer, and
    out's first byte is then x's end."""
    out = []
    for par, words in enumerate(programs):
        for at, _, addrs in steps(words):
            for i in addrs:
                a = words[at + i]
                hit = [b for b, (start, nbytes) in enumerate(ranges) if start <= a < start + nbytes] or \
                      [b for b, (start, nbytes) in enumerate(ranges) if a == start + nbytes]
                if hit:
                    out.append((par, at + i, hit[0], a - ranges[hit[0]][0]))
    return np.array(out, dtype=np.int64).reshape(-1, 4)
