"""The bare ring: the fastest a ring over MPI point-to-point can be from Python.

``--algorithm p2p`` in bench/collectives.py. This is the library's ring with
everything but the data movement taken out: no header check, no deadline,
no chunks, no progress thread, no argument checks, no trace. Each step is
one Isend and one Irecv of a whole segment, then a numpy reduce. What is
left is what any ring built on MPI point-to-point must pay on the machine:
the copies MPI makes (on one node, each receiver pulls its peer's segment
with one kernel copy) and the reduces.

So it answers a question a benchmark alone cannot: when ``ring`` is slower
than ``mpi`` at some size, is that our overhead (compare ``ring`` with
``p2p``) or the transport itself (compare ``p2p`` with ``mpi``)? It is a
measuring stick, not a collective to use: a mismatched call hangs here.
"""
from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from collectives.host.schedule import all_gather_step, offsets, reduce_scatter_step, split_counts  # noqa: E402

_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _check_op(op: str) -> None:
    if op not in _UFUNCS:
        raise ValueError(f"the bare ring measures ops {sorted(_UFUNCS)}, not {op!r}")


def _bytes(a: np.ndarray):
    return [a.view(np.uint8), MPI.BYTE]


class BareRing:
    """Ring all-reduce, reduce-scatter, all-gather and a broadcast chain on
    host arrays, with the signatures of :class:`collectives.Communicator`
    (``out`` is required)."""

    def __init__(self, mpi_comm=None):
        self.comm = mpi_comm if mpi_comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.rank, self.comm.size
        self._tmp: dict = {}

    def _scratch(self, name, n, dtype):
        buf = self._tmp.get(name)
        if buf is None or buf.size < n or buf.dtype != dtype:
            buf = self._tmp[name] = np.empty(n, dtype)
        return buf[:n]

    def _exchange(self, send, recv, right, left):
        MPI.Request.Waitall([self.comm.Irecv(_bytes(recv), left, 7), self.comm.Isend(_bytes(send), right, 7)])

    def _reduce_scatter_steps(self, x, counts, op, dest):
        """Steps 0 .. n-2; ``dest(t, seg)`` is where step t's partial of ``seg`` goes."""
        n, r = self.size, self.rank
        right, left = (r + 1) % n, (r - 1) % n
        offs = offsets(counts)
        seg = lambda a, s: a[offs[s]:offs[s + 1]]  # noqa: E731
        tmp = self._scratch("recv", max(counts), x.dtype)
        send = seg(x, reduce_scatter_step(r, n, 0)[0])
        for t in range(n - 1):
            recv_seg = reduce_scatter_step(r, n, t)[1]
            into = dest(t, recv_seg)
            # straight into the destination when it is not the input (then reduced
            # there: one buffer fewer to pass through), else into scratch
            got = into if not np.shares_memory(into, x) else tmp[:counts[recv_seg]]
            self._exchange(send, got, right, left)
            send = into
            _UFUNCS[op](seg(x, recv_seg), got, out=send)

    def _gather_steps(self, buf, counts):
        n, r = self.size, self.rank
        offs = offsets(counts)
        for t in range(n - 1):
            send_seg, recv_seg = all_gather_step(r, n, t)
            self._exchange(buf[offs[send_seg]:offs[send_seg + 1]], buf[offs[recv_seg]:offs[recv_seg + 1]],
                           (r + 1) % n, (r - 1) % n)

    def all_reduce(self, x, op="sum", out=None):
        _check_op(op)
        if self.size == 1:
            out[...] = x
            return out
        counts = split_counts(x.size, self.size)
        offs = offsets(counts)
        self._reduce_scatter_steps(x, counts, op, lambda t, s: out[offs[s]:offs[s + 1]])
        self._gather_steps(out, counts)
        return out

    def reduce_scatter(self, x, op="sum", out=None):
        _check_op(op)
        n = self.size
        counts = [x.size // n] * n
        if n == 1:
            out[...] = x
            return out
        acc = [self._scratch(f"acc{i}", counts[0], x.dtype) for i in range(2)]
        self._reduce_scatter_steps(x, counts, op, lambda t, s: out if t == n - 2 else acc[t % 2])
        return out

    def all_gather(self, x, out=None):
        n, r = self.size, self.rank
        counts = [x.size] * n
        if n == 2:  # send straight from x, then copy x into place (as MPI's two-rank all-gather)
            self._exchange(x, out[(1 - r) * x.size:(2 - r) * x.size], 1 - r, 1 - r)
            out[r * x.size:(r + 1) * x.size] = x
            return out
        out[r * x.size:(r + 1) * x.size] = x
        self._gather_steps(out, counts)
        return out

    def broadcast(self, x, root=0, out=None):
        n, r = self.size, self.rank
        hop = (r - root) % n
        if hop == 0:
            if out is not x:
                out[...] = x
        else:
            self.comm.Recv(_bytes(out), (r - 1) % n, 9)
        if hop < n - 1:
            self.comm.Send(_bytes(out), (r + 1) % n, 9)
        return out

    def barrier(self):
        self.comm.Barrier()

    def close(self):
        pass
