"""The process group's calls that the Communicator has no counterpart for: all-to-all
(single and list form), scatter, and point-to-point send and receive, over the group's
wire (wires.py: MPI's own calls in an MPI world, Gloo's in a store world).

The collectives are queued on the Communicator's progress thread, so they
keep their place in the call order every rank shares; point-to-point calls
are posted at once, since torch leaves their order across ranks to the
caller. Every wait has the group's timeout and names the rank and peer.
Tensors reach the wire as contiguous CPU bytes: CUDA tensors and strided ones
go through host copies.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllToAllOptions, ScatterOptions

from ..errors import CollectiveError
from .errors import torch_error
from .ops import Stage, split_counts
from .start import start


def _u8(t):
    """A contiguous CPU tensor's bytes, as a uint8 tensor over the same memory."""
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)  # an empty tensor's stride may be 0: no view of it
    return t.reshape(-1).view(torch.uint8)


class P2PWork(dist.Work):
    """A posted send or receive: ``wait()`` completes it (or raises at the group's
    timeout, naming the peer), then copies a staged receive back."""

    def __init__(self, wire, req, status, what: str, back=None, keep=None):
        super().__init__()
        self._wire, self._req, self._status, self._what = wire, req, status, what
        self._back, self._keep, self._done = back, keep, False

    def wait(self, timeout=None) -> bool:
        if not self._done:
            try:
                self._wire.wait(self._req, self._status, self._what)
            except CollectiveError as e:  # a timeout is torch's DistBackendError
                raise torch_error(e) from None
            if self._back is not None:
                self._back()
            self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done or self._wire.done(self._req, self._status)

    def _source_rank(self) -> int:
        """The group rank a receive from any source came from (after wait())."""
        return self._wire.source(self._req, self._status)

    def get_future(self) -> torch.futures.Future:
        self.wait()
        fut = torch.futures.Future()
        fut.set_result([])
        return fut


class PeerCalls:
    """Mixin for RingzeroProcessGroup (needs ``comm`` and ``_wire``)."""

    def _queued(self, label: str, run, outputs, stage, opts):
        """Queue ``run()`` (a blocking wire call) on the progress thread, in call order."""
        if self._wire is None:
            raise RuntimeError(f"{label}: this group has no wire for all-to-all, scatter, send and recv")
        work = self.comm.engine.submit(run, label)
        return start([lambda a: work], outputs, stage, opts)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          opts=AllToAllOptions()):
        """One all-to-all of bytes, queued in call order."""
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
        label = f"all_to_all_single on rank {rank}"
        return self._queued(label, lambda: self._wire.alltoallv(_u8(x), sc, _u8(out), rc, label), [output], stage,
                            opts)

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
        label = f"alltoall on rank {rank}"
        return self._queued(label, lambda: self._wire.alltoallv(_u8(x), sc, _u8(out), rc, label),
                            list(output_tensors), stage, opts)

    def scatter(self, output_tensors, input_tensors, opts=ScatterOptions()):
        """The root's list of ``size`` tensors, piece r to rank r."""
        n, rank, root = self.comm.size, self.comm.rank, opts.rootRank
        if len(output_tensors) != 1:
            raise ValueError(f"scatter on rank {rank}: expects one output tensor, got {len(output_tensors)}")
        (output,) = output_tensors
        stage = Stage()
        out = stage.host_copy(output) if output.is_cuda else stage.output(output)
        size = out.element_size()
        x, sc = None, None
        if rank == root:
            pieces = input_tensors[0] if input_tensors else []
            if len(pieces) != n:
                raise ValueError(f"scatter on root {rank}: needs {n} tensors to scatter, got {len(pieces)}")
            if any(p.dtype != output.dtype for p in pieces):
                raise TypeError(f"scatter on root {rank}: the pieces must be {output.dtype} like the output")
            x = torch.cat([p.detach().reshape(-1).cpu() for p in pieces])
            sc = [p.numel() * size for p in pieces]
        label = f"scatter from {root} on rank {rank}"
        return self._queued(label, lambda: self._wire.scatterv(None if x is None else _u8(x), sc, _u8(out), root,
                                                               label), [output], stage, opts)

    # ----------------------------------------------------------- point-to-point
    def send(self, tensors, dstRank: int, tag: int = 0):
        (t,) = tensors
        x = t.detach().contiguous().cpu()
        req, status = self._p2p().send(_u8(x), dstRank, tag)
        return P2PWork(self._wire, req, status, f"send to rank {dstRank} (tag {tag}) on rank {self.comm.rank}",
                       keep=x)  # the send buffer lives as long as the request

    def recv(self, tensors, srcRank: int, tag: int = 0):
        return self._recv(tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        return self._recv(tensors, None, tag)

    def _recv(self, tensors, src, tag):
        (t,) = tensors
        direct = not t.is_cuda and t.is_contiguous()
        buf = t.detach() if direct else torch.empty(t.shape, dtype=t.dtype)
        req, status = self._p2p().recv(_u8(buf), src, tag)
        who = "any rank" if src is None else f"rank {src}"
        return P2PWork(self._wire, req, status, f"recv from {who} (tag {tag}) on rank {self.comm.rank}",
                       back=None if direct else (lambda: t.detach().copy_(buf)), keep=buf)

    def _p2p(self):
        if self._wire is None:
            raise RuntimeError(f"send/recv on rank {self.comm.rank}: this group has no wire for point-to-point")
        return self._wire
