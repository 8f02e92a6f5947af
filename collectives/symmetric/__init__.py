"""Symmetric memory: a heap every rank of a node maps, and collectives that
read peers' buffers in place (see DESIGN.md, "Symmetric memory within a node").

``Communicator.alloc(shape, dtype)`` makes the heap on first use (a call every
rank makes) and returns arrays in it; a collective whose input lives in the
heap on every rank takes the direct path. Pieces:

- heap.py: the windows (``MPI.Win.Allocate_shared`` + ``Shared_query``) and
  where an array lives in them.
- signals.py: one control slot per rank: sequence-number flags with
  deadlines, and the header agreement, checked before any data is read.
- direct.py: reduce-scatter, all-gather, all-reduce, broadcast, barrier
  within a node; stage.py: ordinary host arrays copied into a stage window
  (by default on two ranks of a node, see ``staged``); by_ring.py: staged
  calls past their size limit run the ring; pipe.py: from tens of megabytes,
  all-reduces and all-gathers pipelined through shared memory instead.
- hier.py: several nodes: direct within each node, the ring between them.
"""
from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from .cma import probe
from .direct import Direct
from .heap import Heap, node_comm
from .pipe import pipe_min
from .signals import Signals

# Staging ordinary host arrays by default (COLLECTIVES_STAGE unset): where a staged
# call beat the ring, per collective, on two ranks of one node (paired in one
# launch, docs/symmetric.md "Staging by default"). A staged call whose agreed
# input (an all-gather's: the largest piece) is larger takes the ring after the
# header check in shared memory (Direct._by_ring). Nothing was measured at other
# node sizes (the machine has two cores): there the default is the ring.
# Staged, each rank copies its input once more than the ring's single-copy
# transfers: an all-gather (three copies of a piece against two) loses from
# 1 MiB; a one-phase all-reduce lost from 2 MiB to the chunked ring, and from
# 768 KiB to the two-rank ring that sends each segment whole (collectives/pair.py;
# paired, one launch, loaded machine: MPI's time / ours at 768 KiB staged 0.70-0.98x,
# ring 0.98-1.07x; at 1 MiB 0.79-1.00x against 1.03-1.09x; even at 512 KiB);
# a staged reduce-scatter (half the input copied) beat the chunked ring at every
# size, but loses from 512 KiB to the two-rank ring's one message a rank (MPI's
# time / ours, paired: 512 KiB staged 1.74-1.83x, ring 1.89-2.02x; 1 MiB
# 2.02x against 2.62x; 2 MiB 1.90-2.03x against 2.19-2.60x; not measured
# between 256 and 512 KiB); broadcasts won at every size measured, but the stage
# window is twice the largest staged input on every rank, so they stop at 2 MiB
# (a 4 MiB window), past which the win was small (0.83-0.99x the ring's time).
# With the C programs (fast.py) a staged all-reduce won again up to 1 MiB and a staged
# reduce-scatter at 512 KiB (MPI's time / ours, paired, one launch, two runs: all-reduce
# 512 KiB 1.87/1.75x staged against 1.18/1.20x for the ring, 1 MiB 1.45/1.48x against
# 1.10/1.26x, 2 MiB a tie, 4 MiB 1.05-1.11x against 1.45-1.55x; reduce-scatter 512 KiB
# 2.35x against 1.89x, 1 MiB a tie, 2 MiB 1.62x against 1.87x).
STAGE_MAX_BYTES = {"all_reduce": 1 << 20, "reduce_scatter": 512 << 10, "all_gather": 512 << 10,
                   "broadcast": 2 << 20}
STAGE_RANKS = 2  # the node size the table was measured at

__all__ = ["Symmetric", "Heap", "Direct", "Signals", "node_comm", "staged", "stage_mode", "STAGE_MAX_BYTES"]

_no_stage = [0]  # >0 while the hierarchy builds its rail communicator (the ring between nodes)


def stage_mode() -> str:
    """``COLLECTIVES_STAGE``: "0" never stage, "1" stage every ordinary host array
    at every size (for tests and measurements), anything else (unset) "auto":
    stage where it was measured to win (``STAGE_MAX_BYTES``)."""
    v = os.environ.get("COLLECTIVES_STAGE", "")
    return v if v in ("0", "1") else "auto"


def staged(comm):
    """A Symmetric that stages ordinary host arrays through symmetric scratch (one
    copy in) for ``comm``, so they take the direct path; None where staging is off
    (``COLLECTIVES_STAGE=0``, a baseline algorithm, a non-MPI transport, a rail
    between nodes) or, by default, not measured to win (a node of other than
    STAGE_RANKS ranks, several nodes). Every rank decides alike: the mode comes
    from the environment (set it alike everywhere), the sizes from the world and
    node communicators. Costs one node split and a control window now; the stage
    window is made by the first staged call and grows with the sizes staged."""
    mode = stage_mode()
    world = getattr(comm.transport, "comm", None)
    if mode == "0" or comm.algorithm != "ring" or world is None or _no_stage[0]:
        return None
    if mode == "auto" and world.Get_size() != STAGE_RANKS:
        return None  # decided before any collective call: nothing made, nothing spent
    if mode == "auto" and not _ucx_osc_out(world):
        return None  # MPI was started with Open MPI's UCX one-sided component in (see collectives/__init__)
    node = node_comm(world)
    if mode == "auto" and node.Get_size() != world.Get_size():
        node.Free()  # several nodes: the ring (forced staging goes through hier.py)
        return None
    sym = Symmetric(comm, node=node)
    sym.stage = True
    sym.direct.pids = probe(node)  # large all-gather pieces read in place where the kernel allows (cma.py)
    if mode == "auto":
        sym.direct.stage_max = STAGE_MAX_BYTES
    sym.direct.pipe_min = pipe_min(mode)  # the largest staged calls: the pipe (pipe.py)
    return sym


def _ucx_osc_out(world) -> bool:
    """Whether every rank started MPI with Open MPI's UCX one-sided component left out (or
    may have: not Open MPI's concern, or the user chose); agreed, so every rank decides alike."""
    from .. import UCX_OSC_MAYBE_ON

    return bool(world.allreduce(0 if UCX_OSC_MAYBE_ON else 1, op=MPI.MIN))


class Symmetric:
    """The communicator's symmetric side: heap, signals, direct and hierarchical paths.

    Args:
      comm: the owning Communicator (its MPI transport gives the ranks).
      direct: take the direct path for heap buffers (False for the baselines,
        which get heap arrays from ``alloc`` but run their own collectives).
      node: the node communicator when the caller has split it already.
    """

    def __init__(self, comm, direct: bool = True, node=None):
        transport = comm.transport
        world = getattr(transport, "comm", None)
        if world is None:
            raise TypeError(f"alloc needs an MPI communicator (a symmetric heap is an MPI shared-memory "
                            f"window); this one runs over {type(transport).__name__}")
        self.rank = world.Get_rank()
        node = node if node is not None else node_comm(world)
        self.heap = Heap(node)
        ranks = node.allgather(self.rank)
        self.signals = Signals(self.heap, ranks, getattr(transport, "oversubscribed", False))
        self.direct = Direct(self.heap, self.signals)
        self.single_node = node.Get_size() == world.Get_size()
        self.hier = None
        if not self.single_node:
            from .hier import Hierarchy
            self.hier = Hierarchy(comm, self, ranks)
        self.enabled = direct and (self.single_node or self.hier.usable)
        self.stage = False  # ordinary host arrays too, copied into symmetric scratch (see staged())

    def alloc(self, shape, dtype) -> np.ndarray:
        """An array in the heap (a collective call over the node)."""
        return self.heap.alloc(shape, dtype)

    def takes(self, x) -> bool:
        """Whether a collective on ``x`` takes the direct path (``x`` is in the heap)."""
        if not self.enabled:
            return False
        return self.heap.locate(x) is not None or (self.stage and type(x) is np.ndarray)

    # Each collective: x and out as the caller passed them, any shape (the identity
    # of a private out keys the cached plans; flat views are made inside).
    def all_reduce(self, ctx, hdr, x, out, op):
        if self.hier is not None:
            return self.hier.all_reduce(ctx, hdr, x, out, op)
        loc = self.heap.locate
        return self.direct.all_reduce(ctx, hdr, x, out, op, loc(x), loc(out))

    def reduce_scatter(self, ctx, hdr, x, out, counts, op):
        if self.hier is not None:
            return self.hier.reduce_scatter(ctx, hdr, x, out, counts, op)
        return self.direct.reduce_scatter(ctx, hdr, x, out, counts, op, self.heap.locate(x))

    def all_gather(self, ctx, hdr, x, out, counts):
        if self.hier is not None:
            return self.hier.all_gather(ctx, hdr, x, out, counts)
        return self.direct.all_gather(ctx, hdr, x, out, counts, self.heap.locate(x), oloc=self.heap.locate(out))

    def broadcast(self, ctx, hdr, x, out, root):
        if self.hier is not None:
            return self.hier.broadcast(ctx, hdr, x, out, root)
        return self.direct.broadcast(ctx, hdr, x, out, root, self.heap.locate(x))

    def close(self) -> None:
        if self.hier is not None:
            self.hier.close()
        self.heap.close()
        self.heap.comm.Free()

    def barrier(self, ctx, hdr):
        if self.hier is not None:
            return self.hier.barrier(ctx, hdr)
        return self.direct.barrier(ctx, hdr)
