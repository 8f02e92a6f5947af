"""The process group's rooted collectives, the coalesced all-gather, and its names.

``reduce`` and ``gather`` are built from all-reduce and all-gather (every
rank computes what the root keeps; the others discard it): the ring moves
the same bytes for a reduce as for an all-reduce's first half and more, but
correctness and a clear call order come first. (All-to-all, scatter and
point-to-point run on the group's wire: peer.py.) The deprecated
``allgather_coalesced`` is one list-form all-gather per tensor.
The group's names (get/setGroupName, get/setGroupDesc) live here too.
"""
from __future__ import annotations

import torch
from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, GatherOptions, ReduceOptions


class RootedCollectives:
    """Mixin for RingzeroProcessGroup (needs ``allreduce``, ``allgather`` and ``comm``)."""

    def reduce(self, tensors, opts=ReduceOptions()):
        ar = AllreduceOptions()
        ar.reduceOp = opts.reduceOp
        if hasattr(opts, "asyncOp"):
            ar.asyncOp = opts.asyncOp
        if self.comm.rank != opts.rootRank:
            tensors = [t.clone() for t in tensors]  # only the root's tensor changes
        return self.allreduce(tensors, ar)

    def gather(self, output_lists, inputs, opts=GatherOptions()):
        ag = AllgatherOptions()
        if hasattr(opts, "asyncOp"):
            ag.asyncOp = opts.asyncOp
        if self.comm.rank != opts.rootRank or not output_lists:
            output_lists = [[torch.empty_like(i) for _ in range(self.comm.size)] for i in inputs]
        return self.allgather(output_lists, inputs, ag)

    def allgather_coalesced(self, output_lists, inputs, opts=AllgatherOptions()):
        """``output_lists[r][i]`` receives rank r's ``inputs[i]``: one list-form
        all-gather per input tensor."""
        n = self.comm.size
        if len(output_lists) != n or any(len(o) != len(inputs) for o in output_lists):
            raise ValueError(f"all_gather_coalesced on rank {self.comm.rank}: needs {n} output lists of "
                             f"{len(inputs)} tensors each")
        return self.allgather([[output_lists[r][i] for r in range(n)] for i in range(len(inputs))], inputs, opts)

class GroupNames:
    """The names torch gives a group (DTensor and functional collectives need them set:
    "ProcessGroup name not set" otherwise), for a mixin beside dist.ProcessGroup."""

    _group_name = ""
    _group_desc = ""

    def getBackendName(self) -> str:
        return "ringzero"

    def name(self) -> str:
        return "ringzero"

    def getGroupName(self) -> str:
        return self._group_name

    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupDesc(self) -> str:
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = desc

    @property
    def group_name(self) -> str:
        return self._group_name

    @property
    def group_desc(self) -> str:
        return self._group_desc

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc
