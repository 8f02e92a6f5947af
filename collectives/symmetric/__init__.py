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
  within a node.
- hier.py: several nodes: direct within each node, the ring between them.
"""
from __future__ import annotations

import numpy as np

from .direct import Direct
from .heap import Heap, node_comm
from .signals import Signals

# staged inputs larger than this take the ring after the header check (see Direct._by_ring)
STAGE_RING_ABOVE = 512 * 1024

__all__ = ["Symmetric", "Heap", "Direct", "Signals", "node_comm", "staged"]


def staged(comm):
    """``COLLECTIVES_STAGE=1``: a Symmetric made with the communicator that stages
    ordinary host arrays through symmetric scratch (one copy in), so every host
    collective takes the direct path; None where that cannot apply (a baseline
    algorithm, a non-MPI transport). Every rank must set it alike."""
    if comm.algorithm != "ring" or getattr(comm.transport, "comm", None) is None:
        return None
    sym = Symmetric(comm)
    sym.stage = True
    if sym.single_node:
        sym.direct.ring_above = STAGE_RING_ABOVE
    return sym


class Symmetric:
    """The communicator's symmetric side: heap, signals, direct and hierarchical paths.

    Args:
      comm: the owning Communicator (its MPI transport gives the ranks).
      direct: take the direct path for heap buffers (False for the baselines,
        which get heap arrays from ``alloc`` but run their own collectives).
    """

    def __init__(self, comm, direct: bool = True):
        transport = comm.transport
        world = getattr(transport, "comm", None)
        if world is None:
            raise TypeError(f"alloc needs an MPI communicator (a symmetric heap is an MPI shared-memory "
                            f"window); this one runs over {type(transport).__name__}")
        self.rank = world.Get_rank()
        node = node_comm(world)
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
        return self.direct.all_gather(ctx, hdr, x, out, counts, self.heap.locate(x))

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
