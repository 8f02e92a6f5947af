"""The bootstrap over an MPI communicator, for processes an MPI launcher started.

Every exchange is one of MPI's non-blocking collectives, polled against the
bootstrap's deadline, so a rank that never comes turns into a SetupError on
the ranks that did, naming the step, instead of a hang. A request abandoned at
its deadline stays in ``ABANDONED`` with its buffers (MPI may still write them).
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import SetupError
from . import SETUP_TIMEOUT_S, Bootstrap

ABANDONED: list = []
INLINE = 504  # bytes of a rank's message that travel in the first exchange

class MpiBootstrap(Bootstrap):
    """Setup over ``comm`` (an mpi4py communicator; COMM_WORLD when None).

    Args:
      comm: the ranks of the group, in their rank order.
      timeout: seconds every setup step may wait for the slowest rank.
      owned: ``close()`` frees ``comm`` (the splits this bootstrap made; never the caller's).
    """

    def __init__(self, comm=None, timeout: float = SETUP_TIMEOUT_S, owned: bool = False):
        from mpi4py import MPI

        self._MPI = MPI
        self.mpi_comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.mpi_comm.Get_rank(), self.mpi_comm.Get_size()
        self.timeout = float(timeout)
        self._owned = owned
        self._busy = None

    def _wait(self, req, what: str, keep) -> None:
        deadline = time.monotonic() + self.timeout
        while not req.Test():
            if time.monotonic() > deadline:
                ABANDONED.append((req, keep))
                raise SetupError(f"rank {self.rank}: setup step '{what}' timed out after {self.timeout:g} s: "
                                 f"not every one of the {self.size} ranks joined it (did one fail or exit?)")
            time.sleep(50e-6)

    def allgather(self, data: bytes) -> list[bytes]:
        """Every rank's bytes: one exchange of a fixed block (a length and the first INLINE
        bytes), so a late rank meets an abandoned exchange whole; the tails of longer
        messages, if any, in a second."""
        block = np.zeros(INLINE + 8, np.uint8)
        block[:8] = np.frombuffer(np.int64(len(data)).tobytes(), np.uint8)
        head = np.frombuffer(data[:INLINE], np.uint8)
        block[8:8 + head.size] = head
        blocks = np.empty((self.size, INLINE + 8), np.uint8)
        self._wait(self.mpi_comm.Iallgather(block, blocks), "allgather", (block, blocks))
        sizes = [int(np.frombuffer(b[:8].tobytes(), np.int64)[0]) for b in blocks]
        out = [blocks[q, 8:8 + min(sizes[q], INLINE)].tobytes() for q in range(self.size)]
        if max(sizes) <= INLINE:
            return out
        tails = [max(0, n - INLINE) for n in sizes]
        src = np.frombuffer(data[INLINE:], np.uint8) if len(data) > INLINE else np.zeros(0, np.uint8)
        got = np.empty(sum(tails), np.uint8)
        offs = np.concatenate([[0], np.cumsum(tails)[:-1]]).astype(np.int64).tolist()
        MPI = self._MPI
        self._wait(self.mpi_comm.Iallgatherv([src, MPI.BYTE], [got, (tails, offs), MPI.BYTE]), "allgather",
                   (src, got))
        return [out[q] + got[offs[q]:offs[q] + tails[q]].tobytes() for q in range(self.size)]

    def broadcast(self, data: bytes | None, root: int = 0) -> bytes:
        n = np.array([len(data) if self.rank == root else 0], np.int64)
        self._wait(self.mpi_comm.Ibcast(n, root), "broadcast", n)
        buf = np.frombuffer(data, np.uint8).copy() if self.rank == root else np.empty(int(n[0]), np.uint8)
        self._wait(self.mpi_comm.Ibcast([buf, self._MPI.BYTE], root), "broadcast", buf)
        return buf.tobytes()

    def barrier(self) -> None:
        self._wait(self.mpi_comm.Ibarrier(), "barrier", None)

    def split(self, color: int, key: int) -> "MpiBootstrap":
        self.barrier()  # every rank is here: the blocking split below cannot wait for one that is not
        return MpiBootstrap(self.mpi_comm.Split(color, key), self.timeout, owned=True)

    def transport(self, tuning=None):
        from ..transport.mpi import MpiTransport
        return MpiTransport(self.mpi_comm, self.busy(), tuning)

    def close(self) -> None:
        if self._owned and self.mpi_comm != self._MPI.COMM_NULL:
            self.mpi_comm.Free()
            self.mpi_comm = self._MPI.COMM_NULL
