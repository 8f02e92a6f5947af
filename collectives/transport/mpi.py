"""MPI point-to-point transport for host arrays (mpi4py)."""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ..tuning import defaults
from ..waiting import WaitPolicy


_U8 = np.dtype(np.uint8)
CANCEL_GRACE_S = 1.0  # how long a cancelled request may take to complete


def _bytes(buf: np.ndarray):
    # bfloat16 cannot export a buffer; raw bytes work for every dtype.
    return [buf if buf.dtype is _U8 else buf.view(np.uint8), MPI.BYTE]


class MpiTransport:
    """Non-blocking sends and receives on a private duplicate of a communicator.

    The duplicate keeps our tags apart from the user's own messages.

    Args:
      comm: the ranks, in their order.
      busy: (oversubscribed, core_bound) of this rank (busy_policy), which the
        bootstrap works out at setup (``MpiBootstrap(comm).transport()`` makes one).
      tuning: the settings its waits follow (waiting.py); the built-in ones when None.
    """

    def __init__(self, comm: MPI.Comm, busy: tuple[bool, bool], tuning=None):
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        # more ranks on this node than cores: waits must yield instead of spin
        self.oversubscribed, self.core_bound = busy
        self.policy = WaitPolicy(tuning if tuning is not None else defaults(), *busy)
        self.orphans = []  # requests of a collective that failed: kept alive (see Context.abandon)
        self.fault = None  # test-only hook: fault(kind, peer, tag) -> True drops the message

    def isend(self, buf: np.ndarray, peer: int, tag: int):
        if self.fault is not None and self.fault("send", peer, tag):
            return MPI.REQUEST_NULL
        return self.comm.Isend(_bytes(buf), peer, tag)  # positional: keywords cost ~0.4 us here

    def irecv(self, buf: np.ndarray, peer: int, tag: int):
        return self.comm.Irecv(_bytes(buf), peer, tag)

    def probe(self, tag: int) -> bool:
        """Whether a message with ``tag`` from any rank is waiting to be received."""
        return self.comm.Iprobe(MPI.ANY_SOURCE, tag)

    @staticmethod
    def test(handle) -> bool:
        return handle.Test()

    @staticmethod
    def testall(handles) -> bool:
        return MPI.Request.Testall(handles)

    @staticmethod
    def cancel(handles) -> list[int]:
        """Cancel every active request in ``handles`` and complete it.

        MPI_Cancel only asks: a receive that has already matched a message is
        not cancelled, and its bytes land anyway. So each request is then
        completed (bounded by CANCEL_GRACE_S) and its status read. Returns the
        positions of the requests that were not cancelled: a receive among
        them has written its buffer (before this returns, if it completed), a
        send has gone. Those still incomplete after the grace (a peer stuck
        mid-message) stay active: keep them alive (Context.abandon does).
        """
        live = [(i, h) for i, h in enumerate(handles) if h != MPI.REQUEST_NULL]
        for _, h in live:
            try:
                h.Cancel()
            except MPI.Exception:
                pass
        status, kept = MPI.Status(), []
        deadline = time.monotonic() + CANCEL_GRACE_S
        while live:
            pending = []
            for i, h in live:
                if not h.Test(status):
                    pending.append((i, h))
                elif not status.Is_cancelled():
                    kept.append(i)
            live = pending
            if live and time.monotonic() > deadline:
                kept += [i for i, _ in live]
                break
            if live:
                time.sleep(1e-4)
        return sorted(kept)

    def close(self) -> None:
        if self.comm != MPI.COMM_NULL:
            self.comm.Free()
