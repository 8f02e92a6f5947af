"""The direct path's repeated small calls as programs run in C (csrc/fastpath.c;
programs.py writes them).

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

Programs cover, on one node with no tracer: one-phase all-reduces and
reduce-scatters of up to ``MAX_BYTES``, pushed all-reduces (no input staged)
and all-gathers of up to ``MAX_COPY_BYTES``, and the barrier; float32/64
with sum and prod, int32/64 with sum, prod, max and min (numpy's float
max/min treat signed zeros in ways a C comparison does not reproduce; half
types accumulate in float32 in Python). Everything else, and everything when
the extension was not built or ``COLLECTIVES_FAST=0``, runs in Python.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ..errors import CollectiveError
from .allreduce import _flat, pushable
from .cma import address as _addr
from .signals import READY

try:
    from .. import _fastpath as _c
except ImportError:  # built without a C compiler: the Python path does everything
    _c = None

ENABLED = _c is not None and os.environ.get("COLLECTIVES_FAST", "") != "0"
# reductions up to this size (a staged all-reduce of 512 KiB-1 MiB: 1.45-1.87x MPI's time in C, 1.10-1.26x in
# Python, paired; past 2 MiB the two-rank ring wins, symmetric/__init__.py)
MAX_BYTES = 1 << 20
# all-gathers (copies only, memcpy either way: the Python steps cost 10-40 us at 1 MiB) and pushed all-reduces
# (chunks of 256 KiB, reduced and copied with the GIL released: 1.07-1.16x the Python push at 2-16 MiB, paired)
MAX_COPY_BYTES = 64 << 20
MAX_REBUILDS = 4  # peers keep changing their arrays under one plan: stay in Python
STEPS = ("header posted", "input staged", "done reading")  # what a WAIT waits for (timeouts name it)


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
        except OSError as err:  # process_vm_readv refused (cma.py): peers time out waiting for us
            comm._broken = err
            raise CollectiveError(f"rank {comm.rank}: {p.kind} #{seq}: {err}") from err
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
    from ..dispatch import _host  # the numpy array the direct path works on
    from . import programs  # the extension is there (ENABLED)

    d, kind = sym.direct, p.kind
    if kind == "barrier":
        return _barrier(d, programs.Writer(d, p.hdr))
    x, out = _flat(_host(xa)), _flat(_host(oa))
    w = programs.Writer(d, p.hdr)
    # all-gathers are copies only; a pushed all-reduce reduces 256 KiB chunks with the GIL released
    big = kind == "all_gather" or (kind == "all_reduce" and pushable(w.src, w.dst, x.nbytes))
    if x.dtype not in programs.DTYPES or max(x.nbytes, out.nbytes) > (MAX_COPY_BYTES if big else MAX_BYTES):
        return None
    if kind == "all_reduce":
        op, xloc, oloc = p.args
        ok = programs.all_reduce(w, d, x, out, op, xloc, oloc)
    elif kind == "reduce_scatter":
        op, counts, xloc = p.args
        ok = programs.reduce_scatter(w, d, x, out, op, counts, xloc)
    elif kind == "all_gather":
        counts, xloc, oloc = p.args
        ok = programs.all_gather(w, d, x, out, counts, xloc, oloc)
    else:
        return None
    if not ok:
        return None
    # (the caller's arrays are not kept: a plan hit means they live, unchanged, where they were)
    return Program(d, w.words, w.stage, w.keep, p.fast_rebuilds)


def _barrier(d, w):
    for par in (0, 1):
        w.post(par, (-1, -1), (-1, -1), READY)
        w.wait_peers(READY, 0)
        w.hcheck(par)
        w.end()
    return Program(d, w.words, None, w.keep, 0)
