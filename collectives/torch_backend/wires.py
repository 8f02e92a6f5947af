"""What carries the process group's all-to-all, scatter, send and receive: MPI's own calls
in an MPI world, a Gloo group on the same store in a store world.

Both move bytes: every tensor reaches a wire as a contiguous CPU uint8 tensor
(peer.py stages the rest), so every dtype travels alike. A wire has
``alltoallv`` and ``scatterv`` (blocking, run on the Communicator's progress
thread in call order, bounded by the group's timeout) and ``send``/``recv``
(posted at once; ``wait`` bounded by the timeout, naming rank and peer). Traffic
never meets the ring's: MPI's calls run on duplicates of the group's
communicator, Gloo's on a Gloo group of their own.
"""
from __future__ import annotations

import time
from datetime import timedelta

from ..errors import CollectiveError, CollectiveTimeout
from ..host.schedule import offsets


def _np(t):
    """A contiguous CPU uint8 tensor's memory as a numpy view."""
    return t.detach().numpy()


class MpiWire:
    """MPI's Ialltoallv, Iscatterv, Isend and Irecv on duplicates of ``comm`` (the group's)."""

    ANY = None  # recv from any source: filled with MPI.ANY_SOURCE

    def __init__(self, comm, timeout: float):
        from mpi4py import MPI
        self.MPI, self.timeout, self.rank = MPI, float(timeout), comm.Get_rank()
        self.comm = comm
        self.coll, self.p2p = comm.Dup(), comm.Dup()

    def _poll(self, req, what: str, status=None) -> None:
        deadline = time.monotonic() + self.timeout
        while not req.Test(status):
            if time.monotonic() > deadline:
                raise CollectiveTimeout(f"{what}: not complete after {self.timeout:g} s")
            time.sleep(20e-6)

    def alltoallv(self, x, sc, out, rc, what: str) -> None:
        B = self.MPI.BYTE
        self._poll(self.coll.Ialltoallv([_np(x), (sc, offsets(sc)[:-1]), B], [_np(out), (rc, offsets(rc)[:-1]), B]),
                   what)

    def scatterv(self, x, sc, out, root: int, what: str) -> None:
        B = self.MPI.BYTE
        send = [_np(x), (sc, offsets(sc)[:-1]), B] if self.rank == root else None
        self._poll(self.coll.Iscatterv(send, [_np(out), B], root=root), what)

    def send(self, t, dst: int, tag: int):
        return self.p2p.Isend([_np(t), t.numel(), self.MPI.BYTE], dest=dst, tag=tag), None

    def recv(self, t, src, tag: int):
        status = self.MPI.Status()
        source = self.MPI.ANY_SOURCE if src is None else src
        return self.p2p.Irecv([_np(t), t.numel(), self.MPI.BYTE], source=source, tag=tag), status

    def done(self, req, status) -> bool:
        return bool(req.Test(status))

    def wait(self, req, status, what: str) -> None:
        self._poll(req, what, status)

    @staticmethod
    def source(req, status) -> int:
        return status.Get_source()

    def close(self) -> None:
        for c in (self.coll, self.p2p, self.comm):
            c.Free()


class GlooWire:
    """A Gloo process group of the group's ranks on the group's store, used by nothing else.

    Args:
      store: the group's store (a PrefixStore of its own).
      rank, size: this rank and the group's size.
      timeout: the group's timeout, for every wait.
    """

    def __init__(self, store, rank: int, size: int, timeout: float):
        import torch.distributed as dist
        self.timeout, self.rank = float(timeout), rank
        self.pg = dist.ProcessGroupGloo(store, rank, size, timedelta(seconds=timeout))

    def _wait(self, work, what: str) -> None:
        try:
            work.wait()
        except RuntimeError as e:
            kind = CollectiveTimeout if "imed out" in str(e) else CollectiveError
            raise kind(f"{what}: {str(e).splitlines()[0]}") from None

    def alltoallv(self, x, sc, out, rc, what: str) -> None:
        from torch.distributed import AllToAllOptions
        self._wait(self.pg.alltoall_base(out, x, rc, sc, AllToAllOptions()), what)

    def scatterv(self, x, sc, out, root: int, what: str) -> None:
        """An all-to-all in which only ``root`` sends: Gloo's scatter wants equal pieces."""
        import torch
        n = self.pg.size()
        sends = sc if self.rank == root else [0] * n
        x = x if self.rank == root else torch.empty(0, dtype=torch.uint8)
        self.alltoallv(x, sends, out, [out.numel() if q == root else 0 for q in range(n)], what)

    def send(self, t, dst: int, tag: int):
        return self.pg.send([t], dst, tag), None

    def recv(self, t, src, tag: int):
        return (self.pg.recv_anysource([t], tag) if src is None else self.pg.recv([t], src, tag)), None

    @staticmethod
    def done(req, status) -> bool:
        return False  # Gloo's point-to-point Work says so only to wait()

    def wait(self, req, status, what: str) -> None:
        self._wait(req, what)

    @staticmethod
    def source(req, status) -> int:
        return req._source_rank()

    def close(self) -> None:
        try:
            self.pg.shutdown()
        except Exception:  # noqa: BLE001  shut either way
            pass
