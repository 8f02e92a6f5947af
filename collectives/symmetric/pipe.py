"""The pipe road: the largest staged all-reduces and all-gathers, pipelined through
shared memory in C (csrc/pipe.c, run without the GIL).

An ordinary host array is private to its process: a peer gets at it only
through the kernel (process_vm_readv, the single copy that MPI and the ring use
on one node) or through a copy into shared memory. Whole-buffer staging pays
one pass over memory more than the ring, and the ring pays the kernel's copy.
From tens of megabytes, where nothing stays in cache, the pipe beats both:

- The call moves in chunks of ``pipe_chunk_bytes``, through ``pipe_depth``
  slots per rank in the pipe window (heap scratch): each rank copies the chunks
  its peers need into its slots, and the peers take them from there while they
  are still in cache. An all-reduce's rank r copies chunk k of every peer's
  segment of x in; reduces chunk k of its own segment from its x and the peers'
  slots, in rank order, into its reduced slot; then copies chunk k of every
  peer's reduced segment into out. An all-gather's rank copies chunk k of its
  piece in, then every peer's chunk k into out.
- Every write into out is a streaming (non-temporal) store: memory sees out
  written, not read and then written.
- Each rank counts its steps in three words of its control slot (staged,
  reduced, copied out; signals.py's words 1-3), never reset: step k of a call
  is sequence ``Signals.pipe_seq + k`` on every rank (chunk counts come from
  agreed sizes), and a slot is reused only once every peer's counter says it
  has taken what the slot held.

The headers are checked first, as on every direct call (a mismatch raises on
every rank before any chunk moves); a peer that stops inside raises
CollectiveTimeout naming it, its step and the chunk.
"""
from __future__ import annotations

import numpy as np

from ..errors import CollectiveTimeout
from ..fast.codes import C, DTYPES, OPS
from ..kernels import NUMPY_KERNELS
from .allreduce import flat, segments
from .cma import address
from .signals import DONE

STEPS = ("chunk staged", "chunk reduced", "chunk copied out")


def by_pipe(d, ctx, base, kind, x, out, counts, op):
    """Direct ``d``'s all-reduce or all-gather through the pipe, once the headers agree.
    ``counts``: an all-gather's pieces."""
    n, r, dt = d.size, d.rank, x.dtype
    xf = flat(x)
    of = xf if out is x else flat(out)
    if kind == "all_reduce":
        counts = segments(xf.size, n, dt)
        own = 1
        isz, dcode, ocode = dt.itemsize, DTYPES[dt], OPS["sum" if op == "avg" else op]
    else:  # bytes: any dtype
        counts = [c * dt.itemsize for c in counts]
        own = 0 if np.shares_memory(xf, of) else 1  # in place: our piece is there already
        isz, dcode, ocode = 1, 0, 0
    t = d.tuning
    chunk, depth = max(64, t.pipe_chunk_bytes // 64 * 64), t.pipe_depth
    win = d.heap.scratch((n + 1) * depth * chunk, "pipe")
    offs = np.cumsum([0] + counts[:-1]).tolist()
    sig = d.sig
    head = [0 if kind == "all_reduce" else 1, n, r, address(xf), address(of), isz, dcode, ocode, chunk, depth, own, 0]
    desc = np.array(head + [address(w) for w in win.peers] + [address(s) + 8 for s in sig.slots] + offs + counts,
                    dtype=np.int64)
    assert len(head) == C.PIPE_HEAD
    ce = chunk // isz
    k_all = max((c + ce - 1) // ce for c in counts)
    seq = sig.pipe_seq
    spin, yld = sig.policy.times()
    rc = C.pipe(desc.ctypes.data, seq, ctx.deadline, spin, yld, sig.policy.max_sleep)
    if rc:
        q, step = divmod(rc - 1, 3)
        peer = sig.world[q]
        raise CollectiveTimeout(
            f"rank {ctx.rank}: {ctx.label} timed out after {ctx.timeout:g} s: rank {peer} never signalled "
            f"'{STEPS[step]}' for chunk {int(desc[11])} of {k_all} through shared memory (the pipe, "
            f"call {base >> 3}); is rank {peer} stuck or dead?")
    sig.pipe_seq = seq + k_all
    if op == "avg":
        NUMPY_KERNELS.scale(of, n)
    if ctx.tracer is not None:
        segs = [c * (dt.itemsize if kind == "all_reduce" else 1) for c in counts]
        if kind == "all_reduce":  # every peer's chunks of our segment, then every peer's reduced segment
            d.trace(ctx, "pipelined reduce-scatter", [(q, r, segs[r]) for q in range(n)])
        d.trace(ctx, "pipelined all-gather", [(q, q, segs[q]) for q in range(n)])
    sig.raise_to(base + DONE)
