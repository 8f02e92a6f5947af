"""Large calls on private arrays, pipelined through shared memory (a part of Direct).

An ordinary host array is private to its process: a peer gets at it only
through the kernel (process_vm_readv, the single copy that MPI and our ring
use on one node) or through a copy into shared memory. Whole-buffer staging
pays one pass over memory more than the ring, and the ring pays the kernel's
copy, which runs at ~4.3 GB/s a core here whichever way it goes. From tens
of megabytes, where nothing stays in cache, the pipe beats both:

- The call moves in chunks of ``CHUNK_BYTES``, through ``DEPTH`` slots per
  rank in the pipe window (heap scratch): each rank copies the chunks its
  peers need into its slots, and the peers take them from there while they
  are still in cache. An all-reduce's rank r copies chunk k of every peer's
  segment of x in; reduces chunk k of its own segment from its x and the
  peers' slots, in rank order, into its reduced slot; then copies chunk k of
  every peer's reduced segment into out. An all-gather's rank copies chunk k
  of its piece in, then every peer's chunk k into out.
- Every write into out is a streaming (non-temporal) store: memory sees out
  written, not read and then written. Without them the pipe lost to the ring
  (0.92-0.97x at 64 MiB); with them it wins (below).
- Each rank counts its steps in three words of its control slot (staged,
  reduced, copied out; signals.py's words 1-3), never reset: step k of a
  call is sequence ``Signals.pipe_seq + k`` on every rank (chunk counts come
  from agreed sizes), and a slot is reused only once every peer's counter
  says it has taken what the slot held.

Measured (two ranks, float32, paired in one launch; a throwaway prototype of
the same C loop): 64 MiB all-reduce 1.26-1.32x the ring's busbw, all-gather
1.29-1.40x; 32 MiB 1.06-1.12x and 1.10-1.24x; 16 MiB all-reduce even, all-gather
0.72x MPI's. Chunks of 128 KiB-1 MiB, 2-8 deep, all within a few percent.

The call checks headers first, as every direct call does (``Direct._start``:
a mismatch raises on every rank before any chunk moves); a peer that stops
inside raises CollectiveTimeout naming it, its step and the chunk. The loop
is csrc/fastpath.c's ``pipe``, run without the GIL; without the extension
these calls take the ring.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import CollectiveTimeout
from ..kernels import NUMPY_KERNELS
from ..work import on_progress_thread
from .allreduce import _counts, _flat
from .cma import address as _addr
from .signals import DONE

try:
    from .. import _fastpath as _c
except ImportError:  # no C compiler: large staged calls take the ring
    _c = None

# Where the pipe takes over from the ring on two ranks of one node (by total bytes:
# an all-reduce's input, an all-gather's out): see the module docstring.
PIPE_MIN_BYTES = {"all_reduce": 32 << 20, "all_gather": 64 << 20}
CHUNK_BYTES = 256 * 1024
DEPTH = 4
STEPS = ("chunk staged", "chunk reduced", "chunk copied out")
_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2, np.dtype(np.int64): 3}
_OPS = {"sum": 0, "avg": 0, "prod": 1, "max": 2, "min": 3}


def pipe_min(mode: str) -> dict | None:
    """Per collective, the bytes from which staged calls take the pipe, or None
    (never). ``COLLECTIVES_PIPE=0`` turns it off; ``COLLECTIVES_PIPE_MIN=<bytes>``
    sets one limit for both collectives in any staging mode (tests); else the
    measured ``PIPE_MIN_BYTES`` where staging is automatic (``mode`` "auto")."""
    if _c is None or os.environ.get("COLLECTIVES_PIPE", "") == "0":
        return None
    forced = os.environ.get("COLLECTIVES_PIPE_MIN", "")
    if forced:
        return {"all_reduce": int(forced), "all_gather": int(forced)}
    return dict(PIPE_MIN_BYTES) if mode == "auto" else None


def chunk_bytes() -> int:
    """The pipe's chunk (``COLLECTIVES_PIPE_CHUNK``, set alike on every rank, for
    tests that want many chunks from small arrays): whole cache lines. Read when a
    Direct is made (``Direct.pipe_chunk``; explain sets its own)."""
    c = int(os.environ.get("COLLECTIVES_PIPE_CHUNK", "") or CHUNK_BYTES)
    return max(64, c // 64 * 64)


def piped(self, kind, nbytes, dt, op=None) -> bool:
    """Whether a staged call of these (agreed) sizes takes the pipe: every rank
    decides alike. All-reduces need a reduction the C loop has (numpy's float
    max and min treat signed zeros and NaNs in ways a C comparison does not)."""
    m = self.pipe_min
    if m is None or kind not in m or nbytes < m[kind]:
        return False
    if kind == "all_reduce":
        return dt in _DTYPES and op in _OPS and (op in ("sum", "avg", "prod") or dt.kind == "i")
    return True


def by_pipe(self, ctx, base, kind, x, out, counts, op):
    """A staged all-reduce or all-gather through the pipe (see the module docstring),
    once the headers agree. ``counts``: an all-gather's pieces."""
    n, r, dt = self.size, self.rank, x.dtype
    xf = _flat(x)
    of = xf if out is x else _flat(out)
    if kind == "all_reduce":
        counts = _counts(xf.size, n, dt)
        own = 1
        isz, dcode, ocode = dt.itemsize, _DTYPES[dt], _OPS[op]
    else:  # bytes: any dtype
        counts = [c * dt.itemsize for c in counts]
        own = 0 if np.shares_memory(xf, of) else 1  # in place: our piece is there already
        isz, dcode, ocode = 1, 0, 0
    C, D = self.pipe_chunk, DEPTH
    win = self.heap.scratch((n + 1) * D * C, "pipe")
    offs = np.cumsum([0] + counts[:-1]).tolist()
    sig = self.sig
    head = [0 if kind == "all_reduce" else 1, n, r, _addr(xf), _addr(of), isz, dcode, ocode, C, D, own, 0]
    desc = np.array(head + [_addr(w) for w in win.peers] + [_addr(s) + 8 for s in sig.slots] + offs + counts,
                    dtype=np.int64)
    assert len(head) == _c.PIPE_HEAD
    ce = C // isz
    k_all = max((c + ce - 1) // ce for c in counts)
    seq = sig.pipe_seq
    spin = 0.0 if on_progress_thread() else sig.spin
    rc = _c.pipe(desc.ctypes.data, seq, ctx.deadline, spin)
    if rc:
        q, step = divmod(rc - 1, 3)
        peer = sig.world[q]
        raise CollectiveTimeout(
            f"rank {ctx.rank}: {ctx.label} timed out after {ctx.timeout:g} s: rank {peer} never signalled "
            f"'{STEPS[step]}' for chunk {int(desc[11])} of {k_all} through shared memory (direct path, "
            f"pipelined, call {base >> 3}); is rank {peer} stuck or dead?")
    sig.pipe_seq = seq + k_all
    if op == "avg":
        NUMPY_KERNELS.scale(of, n)
    if ctx.tracer is not None:
        segs = [c * (dt.itemsize if kind == "all_reduce" else 1) for c in counts]
        if kind == "all_reduce":  # every peer's chunks of our segment, then every peer's reduced segment
            self._trace(ctx, "pipelined reduce-scatter", [(q, r, segs[r]) for q in range(n)])
        self._trace(ctx, "pipelined all-gather", [(q, q, segs[q]) for q in range(n)])
    sig.raise_to(base + DONE)
