"""``RingzeroProcessGroup``: torch.distributed's collectives over one Communicator.

torch dispatches ``dist.all_reduce`` and friends (and DDP's and FSDP2's
buckets) to the Python methods below. Each one checks its arguments on the
caller's thread, queues async collectives on the group's Communicator (its
progress thread runs them in call order, the same order on every rank), and
returns a torch Work (``FutureWork``) over a ``torch.futures.Future``. The progress
thread completes that future when the last collective of the call finishes
(``Work.add_done_callback``): DDP waits on it from C++ and never calls
``wait()`` itself. The future's value is the list of output tensors.

Tensors the Communicator cannot take as they are (non-contiguous ones, the
pieces of a list-form all-gather or reduce-scatter) go through a contiguous
staging tensor that the same callback copies back before the future
completes.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (AllgatherOptions, AllreduceCoalescedOptions, AllreduceOptions,
                                        BarrierOptions, BroadcastOptions,
                                        ReduceScatterOptions)

from ..communicator import Communicator
from ..errors import CollectiveTimeout
from .errors import torch_error
from .ops import DoneWork, FutureWork, OneWork, Stage, premul_factor, reduce_op, same_length
from .start import contiguous as _contiguous, start
from .ops import plain_op as _plain_op
from . import native, sparse
from .heap_pool import HeapPool
from .peer import PeerCalls
from .rooted import GroupNames, RootedCollectives


# torch 2.13 says on every options object whether the call blocks (older torch does not: async path)
_BLOCKING = all(hasattr(o(), "asyncOp") for o in (AllreduceOptions, AllgatherOptions, ReduceScatterOptions))


class RingzeroProcessGroup(GroupNames, RootedCollectives, PeerCalls, dist.ProcessGroup):
    """A torch ProcessGroup whose collectives run on a ringzero Communicator.

    Args:
      comm: the Communicator of this group's ranks (rank and size must match torch's).
      wire: what carries all-to-all, scatter, send and recv (wires.py: MPI's calls in an
        MPI world, a Gloo group in a store world); None: the group has none of those.
    """

    def __init__(self, comm: Communicator, wire=None):
        super().__init__(comm.rank, comm.size)
        self.comm = comm
        self._wire = wire
        self._group_name = ""
        self._group_desc = ""
        self._closed = False
        self._pool = None  # FSDP2's comm buffers in the heap (allocate_tensor)
        self.native = native.install(self)  # the blocking one-tensor calls read in C++ (native.py)

    def shutdown(self) -> None:
        """Finish queued work, stop the progress thread, close the wire
        (``dist.destroy_process_group`` calls this on every rank)."""
        if self._closed:
            return
        self._closed = True
        self.comm.close()  # later calls raise "communicator is closed"
        if self._wire is not None:
            self._wire.close()

    def __repr__(self) -> str:
        return f"<RingzeroProcessGroup {self._group_name!r} rank {self.comm.rank}/{self.comm.size}>"

    # ---------------------------------------------------------- collectives
    # The one-tensor lanes (allreduce, all_gather_single, reduce_scatter_single on
    # tensors the Communicator takes as they are): blocking (``opts.asyncOp``
    # False), the collective runs on the caller's thread and the lane returns None,
    # torch's own "finished already" (every blocking dist.* call, the only callers
    # that set asyncOp False, skips wait() on None; a Work costs ~1.5 us, and an
    # error is raised here, as wait() would have). Else the call is queued and the
    # lane returns a OneWork (its future completes from the progress thread). The
    # lanes are written out, with no closure or helper between torch and the Communicator.
    # A blocking call tries the Communicator's C lane first (fast/lane.py: it checks
    # the tensors itself and returns None for what it does not take).
    def allreduce(self, tensors, opts=AllreduceOptions()):
        ro = opts.reduceOp
        op = _plain_op(ro)
        if op is not None and len(tensors) == 1:
            t = tensors[0]  # the common call (DDP's buckets too): nothing to stage
            if _BLOCKING and not opts.asyncOp:
                try:
                    lane = self.comm._lane
                    if lane is not None and lane(0, t, t, op) is not None:
                        return None
                    if _contiguous(t):
                        self.comm.all_reduce(t, op=op, out=t)
                        return None
                except CollectiveTimeout as e:  # torch's DistBackendError (errors.torch_error)
                    raise torch_error(e) from None
            elif _contiguous(t):
                return OneWork(self.comm.all_reduce(t, op=op, out=t, async_op=True), tensors)
        op, factor = reduce_op(ro, "allreduce")
        if any(t.layout is not torch.strided for t in tensors):  # sparse COO: gathered (sparse.py)
            for t in tensors:
                sparse.check_layout(t, op, factor, self.comm.rank)
            return sparse.all_reduce(self.comm, tensors)
        stage = Stage()
        launches = []
        for t in tensors:
            c = stage.inout(t)
            if factor is not None:
                c.mul_(premul_factor(factor, c, "allreduce"))
            launches.append(lambda a, c=c: self.comm.all_reduce(c, op=op, out=c, async_op=a))
        return start(launches, list(tensors), stage, opts)

    def allreduce_coalesced(self, tensors, opts=AllreduceCoalescedOptions()):
        return self.allreduce(tensors, opts)

    def all_gather_single(self, output, input, opts=AllgatherOptions()):
        blocking = _BLOCKING and not opts.asyncOp
        lane = self.comm._lane
        try:  # the lane takes contiguous tensors of one dtype, out size x world size only
            if blocking and lane is not None and lane(2, input, output, None) is not None:
                return None
        except CollectiveTimeout as e:
            raise torch_error(e) from None
        if _contiguous(output) and _contiguous(input) and output.dtype == input.dtype \
                and output.numel() == input.numel() * self.comm.size:  # FSDP2's common call: nothing to stage
            if blocking:
                try:
                    self.comm.all_gather(input, out=output)
                except CollectiveTimeout as e:
                    raise torch_error(e) from None
                return None
            return OneWork(self.comm.all_gather(input, out=output, async_op=True), [output])
        return self.all_gather_single_coalesced([output], [input], opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=AllgatherOptions()):
        same_length(outputs, inputs, "all_gather_single")
        stage = Stage()
        launches = []
        for o, i in zip(outputs, inputs):
            if o.numel() != i.numel() * self.comm.size or o.dtype != i.dtype:
                raise ValueError(f"all_gather_into_tensor on rank {self.comm.rank}: output has {o.numel()} "
                                 f"{o.dtype} elements, input {i.numel()} {i.dtype} (x world size {self.comm.size})")
            x, out = stage.input(i), stage.output(o)
            launches.append(lambda a, x=x, out=out: self.comm.all_gather(x, out=out, async_op=a))
        return start(launches, list(outputs), stage, opts)

    def reduce_scatter_single(self, output, input, opts=ReduceScatterOptions()):
        op = _plain_op(opts.reduceOp)
        blocking = _BLOCKING and not opts.asyncOp
        lane = self.comm._lane
        try:  # (as in all_gather_single)
            if op is not None and blocking and lane is not None and lane(1, input, output, op) is not None:
                return None
        except CollectiveTimeout as e:
            raise torch_error(e) from None
        if op is not None and _contiguous(output) and _contiguous(input) and output.dtype == input.dtype \
                and input.numel() == output.numel() * self.comm.size:  # the common call: nothing to stage
            if blocking:
                try:
                    self.comm.reduce_scatter(input, op=op, out=output)
                except CollectiveTimeout as e:
                    raise torch_error(e) from None
                return None
            return OneWork(self.comm.reduce_scatter(input, op=op, out=output, async_op=True), [output])
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=ReduceScatterOptions()):
        same_length(outputs, inputs, "reduce_scatter_single")
        op, factor = reduce_op(opts.reduceOp, "reduce_scatter")
        stage = Stage()
        launches = []
        for o, i in zip(outputs, inputs):
            if i.numel() != o.numel() * self.comm.size or o.dtype != i.dtype:
                raise ValueError(f"reduce_scatter_tensor on rank {self.comm.rank}: input has {i.numel()} "
                                 f"{i.dtype} elements, output {o.numel()} {o.dtype} (x world size {self.comm.size})")
            x = i * premul_factor(factor, i, "reduce_scatter") if factor is not None else stage.input(i)
            out, counts = stage.output(o), [o.numel()] * self.comm.size
            launches.append(lambda a, x=x, out=out, counts=counts: self.comm.reduce_scatter(
                x, op=op, out=out, counts=counts, async_op=a))
        return start(launches, list(outputs), stage, opts)

    def allgather(self, output_lists, inputs, opts=AllgatherOptions()):
        same_length(output_lists, inputs, "allgather")
        stage = Stage()
        launches = []
        for outs, i in zip(output_lists, inputs):
            if len(outs) != self.comm.size:
                raise ValueError(f"all_gather on rank {self.comm.rank}: {len(outs)} output tensors, "
                                 f"world size {self.comm.size}")
            counts = [o.numel() for o in outs]
            flat = stage.scatter_back(outs, i.dtype, i.device)
            x = stage.input(i)
            launches.append(lambda a, x=x, flat=flat, counts=counts: self.comm.all_gather(
                x, out=flat, counts=counts, async_op=a))
        return start(launches, list(output_lists), stage, opts)

    def reduce_scatter(self, outputs, input_lists, opts=ReduceScatterOptions()):
        same_length(outputs, input_lists, "reduce_scatter")
        op, factor = reduce_op(opts.reduceOp, "reduce_scatter")
        stage = Stage()
        launches = []
        for o, ins in zip(outputs, input_lists):
            if len(ins) != self.comm.size:
                raise ValueError(f"reduce_scatter on rank {self.comm.rank}: {len(ins)} input tensors, "
                                 f"world size {self.comm.size}")
            counts = [i.numel() for i in ins]
            x = torch.cat([i.reshape(-1) for i in ins]) if ins else torch.empty(0, dtype=o.dtype, device=o.device)
            if factor is not None:
                x.mul_(premul_factor(factor, x, "reduce_scatter"))
            out = stage.output(o)
            launches.append(lambda a, x=x, out=out, counts=counts: self.comm.reduce_scatter(
                x, op=op, out=out, counts=counts, async_op=a))
        return start(launches, list(outputs), stage, opts)

    def broadcast(self, tensors, opts=BroadcastOptions()):
        root = opts.rootRank
        if _BLOCKING and not opts.asyncOp and len(tensors) == 1 and opts.rootTensor == 0:
            lane = self.comm._lane  # (as in allreduce)
            try:
                if lane is not None and lane(3, tensors[0], tensors[0], root) is not None:
                    return None
            except CollectiveTimeout as e:
                raise torch_error(e) from None
        stage = Stage()
        launches = []
        for t in tensors:
            c = stage.inout(t)
            launches.append(lambda a, c=c: self.comm.broadcast(c, root=root, out=c, async_op=a))
        return start(launches, list(tensors), stage, opts)

    def barrier(self, opts=BarrierOptions()):
        return start([lambda a: self.comm.barrier(async_op=a)], [], Stage(), opts)

    # ------------------------------------------------- FSDP2's comm buffers
    def supports_tensor_alloc(self, device) -> bool:
        """Whether :meth:`allocate_tensor` serves ``device``: CPU tensors, from the heap."""
        return torch.device(device).type == "cpu"

    def _get_backend(self, device):
        """The group is its own backend (torch registers none inside it): FSDP2 asks it for
        ``supports_tensor_alloc`` through this."""
        return self

    def allocate_tensor(self, size: int, *, dtype, device) -> torch.Tensor:
        """A 1-D CPU tensor of ``size`` elements in the node's heap (heap_pool.py): FSDP2's
        all-gather and reduce-scatter buffers under ``set_allocate_memory_from_process_group_for_comm``."""
        if not self.supports_tensor_alloc(device):
            raise ValueError(f"allocate_tensor on rank {self.comm.rank}: the heap serves CPU tensors, not {device}")
        if self._pool is None:
            self._pool = HeapPool(self.comm)
        return self._pool.tensor(size, dtype)

    # aliases older torch dispatches to
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = PeerCalls.all_to_all_single


__all__ = ["DoneWork", "FutureWork", "OneWork", "RingzeroProcessGroup"]
