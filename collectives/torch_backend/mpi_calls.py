"""What the ringzero process group runs with MPI's own calls: all-to-all
(single and list form), scatter, and point-to-point send and receive.

The Communicator has no counterpart for these, so they use mpi4py on
duplicates of the group's MPI communicator (traffic never meets the ring's).
The collectives are queued on the Communicator's progress thread, so they
keep their place in the call order every rank shares; point-to-point calls
are posted at once, since torch leaves their order across ranks to the
caller. Every wait has the group's timeout and names the rank and peer.
CUDA tensors go through host copies (MPI here moves host memory).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllToAllOptions, ScatterOptions

from ..arrays import adapt
from ..errors import CollectiveTimeout
from ..host.schedule import offsets
from .errors import torch_error
from .ops import Stage, split_counts


def _bytes(t):
    """A contiguous CPU tensor's memory as a uint8 numpy view."""
    return adapt(t, "tensor", writable=True).flat.view("u1")


def _poll(req, timeout: float, what: str, status=None) -> None:
    deadline = time.monotonic() + timeout
    while not req.Test(status):
        if time.monotonic() > deadline:
            raise CollectiveTimeout(f"{what}: not complete after {timeout} s")
        time.sleep(20e-6)


class P2PWork(dist.Work):
    """A posted MPI send or receive: ``wait()`` completes it (or raises at the
    group's timeout, naming the peer), then copies a staged receive back."""

    def __init__(self, req, what: str, timeout: float, back=None, status=None):
        super().__init__()
        self._req, self._what, self._timeout = req, what, timeout
        self._back, self._status, self._done = back, status, False

    def wait(self, timeout=None) -> bool:
        if not self._done:
            try:
                _poll(self._req, self._timeout, self._what, self._status)
            except CollectiveTimeout as e:  # torch's DistBackendError
                raise torch_error(e) from None
            if self._back is not None:
                self._back()
            self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done or bool(self._req.Test(self._status))

    def _source_rank(self) -> int:
        """The group rank a receive from any source came from (after wait())."""
        return self._status.Get_source()

    def get_future(self) -> torch.futures.Future:
        self.wait()
        fut = torch.futures.Future()
        fut.set_result([])
        return fut


class MpiCalls:
    """Mixin for RingzeroProcessGroup (needs ``comm``, ``_a2a_comm``, ``_p2p_comm``, ``_start``)."""

    def _queued(self, label: str, post, launch_outputs, stage, opts):
        """Queue ``post()`` (returns an MPI request) on the progress thread, poll it to the deadline."""
        if self._a2a_comm is None:
            raise RuntimeError(f"{label}: this group has no MPI communicator")

        def body():
            _poll(post(), self.comm.timeout, label)
        work = self.comm.engine.submit(body, label)  # the progress thread keeps call order
        return self._start([lambda a: work], launch_outputs, stage, opts)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          opts=AllToAllOptions()):
        """MPI's own Ialltoallv, queued in call order."""
        n, rank = self.comm.size, self.comm.rank
        in_counts = split_counts(input, input_split_sizes, n, "input", rank)
        out_counts = split_counts(output, output_split_sizes, n, "output", rank)
        if output.dtype != input.dtype:
            raise TypeError(f"all_to_all_single on rank {rank}: output is {output.dtype}, input {input.dtype}")
        stage = Stage()
        if input.is_cuda:
            x, out = input.detach().contiguous().cpu(), stage.host_copy(output)
        else:
            x, out = stage.input(input), stage.output(output)
        size = x.element_size()
        sc, rc = [c * size for c in in_counts], [c * size for c in out_counts]

        def post():
            from mpi4py import MPI
            return self._a2a_comm.Ialltoallv([_bytes(x), (sc, offsets(sc)[:-1]), MPI.BYTE],
                                             [_bytes(out), (rc, offsets(rc)[:-1]), MPI.BYTE])
        return self._queued(f"all_to_all_single on rank {rank}", post, [output], stage, opts)

    def alltoall(self, output_tensors, input_tensors, opts=AllToAllOptions()):
        """List form: piece r of ``input_tensors`` goes to rank r, piece r of the
        output comes from rank r (one flat all-to-all through host copies)."""
        n, rank = self.comm.size, self.comm.rank
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError(f"alltoall on rank {rank}: needs {n} input and {n} output tensors, got "
                             f"{len(input_tensors)} and {len(output_tensors)}")
        dtype = input_tensors[0].dtype
        if any(t.dtype != dtype for t in list(input_tensors) + list(output_tensors)):
            raise TypeError(f"alltoall on rank {rank}: every tensor must be {dtype}")
        x = torch.cat([t.detach().reshape(-1).cpu() for t in input_tensors])
        stage = Stage()
        out = stage.scatter_back(list(output_tensors), dtype, "cpu")
        size = x.element_size()
        sc = [t.numel() * size for t in input_tensors]
        rc = [t.numel() * size for t in output_tensors]

        def post():
            from mpi4py import MPI
            return self._a2a_comm.Ialltoallv([_bytes(x), (sc, offsets(sc)[:-1]), MPI.BYTE],
                                             [_bytes(out), (rc, offsets(rc)[:-1]), MPI.BYTE])
        return self._queued(f"alltoall on rank {rank}", post, list(output_tensors), stage, opts)

    def scatter(self, output_tensors, input_tensors, opts=ScatterOptions()):
        """The root's list of ``size`` tensors, piece r to rank r (MPI's Iscatterv)."""
        n, rank, root = self.comm.size, self.comm.rank, opts.rootRank
        if len(output_tensors) != 1:
            raise ValueError(f"scatter on rank {rank}: expects one output tensor, got {len(output_tensors)}")
        (output,) = output_tensors
        stage = Stage()
        out = stage.host_copy(output) if output.is_cuda else stage.output(output)
        size = out.element_size()
        if rank == root:
            pieces = input_tensors[0] if input_tensors else []
            if len(pieces) != n:
                raise ValueError(f"scatter on root {rank}: needs {n} tensors to scatter, got {len(pieces)}")
            if any(p.dtype != output.dtype for p in pieces):
                raise TypeError(f"scatter on root {rank}: the pieces must be {output.dtype} like the output")
            x = torch.cat([p.detach().reshape(-1).cpu() for p in pieces])
            sc = [p.numel() * size for p in pieces]

        def post():
            from mpi4py import MPI
            send = [_bytes(x), (sc, offsets(sc)[:-1]), MPI.BYTE] if rank == root else None
            return self._a2a_comm.Iscatterv(send, [_bytes(out), MPI.BYTE], root=root)
        return self._queued(f"scatter from {root} on rank {rank}", post, [output], stage, opts)

    # ----------------------------------------------------------- point-to-point
    def send(self, tensors, dstRank: int, tag: int = 0):
        from mpi4py import MPI
        (t,) = tensors
        x = t.detach().contiguous().cpu()
        req = self._p2p().Isend([_bytes(x), x.numel() * x.element_size(), MPI.BYTE], dest=dstRank, tag=tag)
        work = P2PWork(req, f"send to rank {dstRank} (tag {tag}) on rank {self.comm.rank}", self.comm.timeout)
        work._keep = x  # the send buffer lives as long as the request
        return work

    def recv(self, tensors, srcRank: int, tag: int = 0):
        return self._recv(tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        from mpi4py import MPI
        return self._recv(tensors, MPI.ANY_SOURCE, tag)

    def _recv(self, tensors, src, tag):
        from mpi4py import MPI
        (t,) = tensors
        direct = not t.is_cuda and t.is_contiguous()
        buf = t.detach() if direct else torch.empty(t.shape, dtype=t.dtype)
        status = MPI.Status()
        req = self._p2p().Irecv([_bytes(buf), buf.numel() * buf.element_size(), MPI.BYTE], source=src, tag=tag)
        who = "any rank" if src == MPI.ANY_SOURCE else f"rank {src}"
        work = P2PWork(req, f"recv from {who} (tag {tag}) on rank {self.comm.rank}", self.comm.timeout,
                       back=None if direct else (lambda: t.detach().copy_(buf)), status=status)
        work._keep = buf
        return work

    def _p2p(self):
        if self._p2p_comm is None:
            raise RuntimeError(f"send/recv on rank {self.comm.rank}: this group has no MPI communicator")
        return self._p2p_comm

