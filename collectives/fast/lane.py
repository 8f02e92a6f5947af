"""A Communicator's blocking calls on the direct roads, taken into C at their first line (csrc/lane.c).

``Communicator.all_reduce`` and friends hand a blocking call with an ``out`` to
``lane.run`` before anything else. The lane looks the call up by what its
arrays are (type, dtype, count, flags, address), not which objects they are,
so a fresh view ``x[:]`` of a buffer, or a new array where the last one was,
runs the program written for that buffer; arrays of a known shape elsewhere in
memory run that shape's program relocated to their addresses. What the lane
does not take (a first call, device arrays, async calls, a traced or broken
communicator, zero-size or overlapping arrays) it leaves to the Python path,
which runs the call as always and, where it wrote a C program
(fast/program.py), hands it to the lane with ``offer``.

The checks a hit skips are the ones the same key has already passed: the
dtype, sizes, contiguity and writability are in the key, and so is how x lies
against out (apart, the same memory, or x as this rank's piece of an
all-gather's out), so the aliasing rule's verdict is the same. A relocated
program serves only arrays outside the heap, as its model did. ``alloc``
clears the lane (an address may now be in the heap).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import CollectiveError
from ..safety.agree import NF
from ..symmetric.cma import address
from .codes import C

KINDS = {"all_reduce": 0, "reduce_scatter": 1, "all_gather": 2, "broadcast": 3}


def make(comm, replan):
    """The Communicator's lane (None where its calls cannot run in C: no extension, C
    programs off, no heap on one node, or a numpy whose array layout lane.c does not know).

    Args:
      replan: (kind, x, out, arg) -> (plan, x adapted, out adapted): how the Python path
        plans a call (plan.py, with no cache key), for a call the lane began.
    """
    sym = comm.symmetric
    if C is None or not comm.tuning.fast or sym is None or sym.hier is not None or not sym.enabled:
        return None
    d, sig = sym.direct, sym.signals
    spin, yld = sig.policy.times()
    probe = np.empty((2, 3), np.float32)

    def on_stop(p, seq, base, what, q, phase, x, out, arg):
        """The program stopped after posting: the Python path goes on from the same slots."""
        d.stop = (base, what, q, phase)
        again, xa, oa = replan(p.kind, x, out, arg)
        return comm.execute(again, seq, xa, oa, None)

    def on_error(p, seq, exc):
        comm.broken = exc
        if isinstance(exc, OSError):  # process_vm_readv refused (cma.py): peers time out waiting for us
            raise CollectiveError(f"rank {comm.rank}: {p.kind} #{seq}: {exc}") from exc
        raise exc

    try:
        lane = C.Lane(comm, comm.engine, d, sig, on_stop, on_error, comm.rank, NF, spin, yld,
                      sig.policy.max_sleep, probe, address(probe), probe.flags.num)
    except RuntimeError:  # numpy's layout is not the one lane.c reads: the Python path serves every call
        return None
    spans(comm, lane)
    return lane


def spans(comm, lane) -> None:
    """Forget every program and tell the lane where the heap's arrays are."""
    heap = comm.symmetric.heap
    lane.clear(np.array([v for start, w in heap._spans for v in (start, start + w.nbytes)], dtype=np.int64))


def offer(comm, p, xa, oa) -> bool:
    """Give the lane the program plan ``p`` just wrote (fast/program.py) for these arrays."""
    lane, prog = comm.lane, p.program
    if lane is None or prog is None or oa is None:
        return False
    kind = KINDS[p.kind]
    arg = None if p.kind == "all_gather" else p.args[0]  # the op, or a broadcast's root
    relocs = prog.relocs
    return lane.add(kind, xa.obj, oa.obj, arg, p, prog.words[0], prog.words[1],
                    relocs if relocs is not None and len(relocs) else None, prog.stage, prog.road,
                    ctypes.addressof(prog.keep[0]), oa.flat.itemsize)  # keep[0]: the header's wire (writer.py)
