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
completes. Only this file and torch_backend.py import torch.
"""
from __future__ import annotations

import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (AllgatherOptions, AllreduceCoalescedOptions, AllreduceOptions,
                                        BarrierOptions, BroadcastOptions,
                                        ReduceScatterOptions)

from ..communicator import Communicator
from ..errors import CollectiveError
from .ops import DoneWork, FutureWork, OneWork, Stage, premul_factor, reduce_op, same_length
from .ops import plain_op as _plain_op
from .mpi_calls import MpiCalls
from .rooted import GroupNames, RootedCollectives
from ..work import Work


# torch 2.13 says on every options object whether the call blocks (older torch does not: async path)
_BLOCKING = all(hasattr(o(), "asyncOp") for o in (AllreduceOptions, AllgatherOptions, ReduceScatterOptions))


class RingzeroProcessGroup(GroupNames, RootedCollectives, MpiCalls, dist.ProcessGroup):
    """A torch ProcessGroup whose collectives run on a ringzero Communicator.

    Args:
      comm: the Communicator of this group's ranks (rank and size must match torch's).
      mpi_comm: the group's mpi4py communicator, for all-to-all (MPI's Ialltoallv).
    """

    def __init__(self, comm: Communicator, mpi_comm=None):
        super().__init__(comm.rank, comm.size)
        self.comm = comm
        self._mpi_comm = mpi_comm
        self._a2a_comm = mpi_comm.Dup() if mpi_comm is not None else None  # all-to-all, scatter
        self._p2p_comm = mpi_comm.Dup() if mpi_comm is not None else None  # send, recv
        self._group_name = ""
        self._group_desc = ""
        self._closed = False

    def shutdown(self) -> None:
        """Finish queued work, stop the progress thread, free the MPI communicators
        (``dist.destroy_process_group`` calls this on every rank)."""
        if self._closed:
            return
        self._closed = True
        self.comm.close()  # later calls raise "communicator is closed"
        for c in (self._a2a_comm, self._p2p_comm, self._mpi_comm):
            if c is not None:
                c.Free()

    def __repr__(self) -> str:
        return f"<RingzeroProcessGroup {self._group_name!r} rank {self.comm.rank}/{self.comm.size}>"

    # ---------------------------------------------------------- collectives
    # The one-tensor lanes (allreduce, all_gather_single, reduce_scatter_single on
    # tensors the Communicator takes as they are): blocking (``opts.asyncOp``
    # False), the collective runs on the caller's thread and the lane returns None,
    # torch's own "finished already" (every blocking dist.* call, the only callers
    # that set asyncOp False, skips wait() on None; a Work costs ~1.5 us, and an
    # error is raised here, as wait() would have). Else the call is queued and the
    # lane returns a OneWork (its future, made when asked for, completes from the
    # progress thread; a waiter runs the collective itself when it is next in
    # line). The lanes are written out, with no closure or helper between torch
    # and the Communicator: each Python call there cost ~0.2 us of a 1 KiB call's ~6.
    # A blocking call goes to the Communicator's C lane first (fast/lane.py: it
    # checks contiguity itself, and returns None for what it does not take).
    def allreduce(self, tensors, opts=AllreduceOptions()):
        ro = opts.reduceOp
        op = _plain_op(ro)
        if op is not None and len(tensors) == 1:
            t = tensors[0]  # the common call (DDP's buckets too): nothing to stage
            if _BLOCKING and not opts.asyncOp:
                lane = self.comm._lane
                if lane is not None and lane(0, t, t, op) is not None:
                    return None
            if t.is_contiguous():
                if _BLOCKING and not opts.asyncOp:
                    self.comm.all_reduce(t, op=op, out=t)
                    return None
                return OneWork(self.comm.all_reduce(t, op=op, out=t, async_op=True), tensors)
        op, factor = reduce_op(ro, "allreduce")
        stage = Stage()
        launches = []
        for t in tensors:
            c = stage.inout(t)
            if factor is not None:
                c.mul_(premul_factor(factor, c, "allreduce"))
            launches.append(lambda a, c=c: self.comm.all_reduce(c, op=op, out=c, async_op=a))
        return self._start(launches, list(tensors), stage, opts)

    def allreduce_coalesced(self, tensors, opts=AllreduceCoalescedOptions()):
        return self.allreduce(tensors, opts)

    def all_gather_single(self, output, input, opts=AllgatherOptions()):
        lane = self.comm._lane
        if lane is not None and _BLOCKING and not opts.asyncOp and lane(2, input, output, None) is not None:
            return None  # (the lane takes contiguous tensors of one dtype, out size x world size only)
        if output.is_contiguous() and input.is_contiguous() and output.dtype == input.dtype \
                and output.numel() == input.numel() * self.comm.size:  # FSDP2's common call: nothing to stage
            if _BLOCKING and not opts.asyncOp:
                self.comm.all_gather(input, out=output)
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
        return self._start(launches, list(outputs), stage, opts)

    def reduce_scatter_single(self, output, input, opts=ReduceScatterOptions()):
        op = _plain_op(opts.reduceOp)
        lane = self.comm._lane
        if op is not None and lane is not None and _BLOCKING and not opts.asyncOp \
                and lane(1, input, output, op) is not None:
            return None  # (as in all_gather_single)
        if op is not None and output.is_contiguous() and input.is_contiguous() and output.dtype == input.dtype \
                and input.numel() == output.numel() * self.comm.size:  # the common call: nothing to stage
            if _BLOCKING and not opts.asyncOp:
                self.comm.reduce_scatter(input, op=op, out=output)
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
        return self._start(launches, list(outputs), stage, opts)

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
        return self._start(launches, list(output_lists), stage, opts)

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
        return self._start(launches, list(outputs), stage, opts)

    def broadcast(self, tensors, opts=BroadcastOptions()):
        root = opts.rootRank
        stage = Stage()
        launches = []
        for t in tensors:
            c = stage.inout(t)
            launches.append(lambda a, c=c: self.comm.broadcast(c, root=root, out=c, async_op=a))
        return self._start(launches, list(tensors), stage, opts)

    def barrier(self, opts=BarrierOptions()):
        return self._start([lambda a: self.comm.barrier(async_op=a)], [], Stage(), opts)

    # aliases older torch dispatches to
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = MpiCalls.all_to_all_single

    # ----------------------------------------------------------- execution
    def _start(self, launches, outputs, stage, opts=None):
        """Run the collectives; return a torch Work whose future holds ``outputs``.

        ``dist.all_reduce(t)`` without async_op sets ``opts.asyncOp = False``
        (torch 2.13; older torch does not say, and gets the async path): then
        they run on this thread, with no hand-off to the progress thread, and
        the Work is complete on return. Otherwise they are queued and the last
        one to finish completes the future on the progress thread.
        """
        if not getattr(opts, "asyncOp", True):
            try:
                for launch in launches:
                    result = launch(False)
                    if isinstance(result, Work):  # all-to-all: always queued
                        result.wait()
                stage.copy_back()
            except Exception as e:  # noqa: BLE001  wait() raises it, as on the async path
                return DoneWork(outputs, e)
            return DoneWork(outputs)
        fut = torch.futures.Future()
        works = [launch(True) for launch in launches]
        lock = threading.Lock()
        left = [len(works)]
        errors: list = []

        def finished(work):
            try:
                work.result()
            except BaseException as e:  # handed to whoever waits on the future
                errors.append(e)
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            try:
                if errors:
                    raise errors[0]
                stage.copy_back()
            except BaseException as e:
                fut.set_exception(e if isinstance(e, Exception) else CollectiveError(repr(e)))
                return
            fut.set_result(outputs)

        if not works:
            stage.copy_back()
            fut.set_result(outputs)
        for w in works:
            w.add_done_callback(finished)
        return FutureWork(fut, works)


__all__ = ["DoneWork", "FutureWork", "OneWork", "RingzeroProcessGroup"]
