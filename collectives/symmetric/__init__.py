"""Symmetric memory: a heap every rank of a node maps, and the direct roads that
read (or write) peers' buffers in place.

``Communicator.alloc(shape, dtype)`` makes the heap on first use (a call every
rank makes) and returns arrays in it; a collective whose input lives in the
heap on every rank takes a direct road. Where staging is on (``stages``), so
do ordinary host arrays, copied into a stage window. Pieces:

- shm.py, heap.py: the windows (one shared-memory segment per rank, every
  peer's mapped), and where an array lives in them.
- signals.py: one control slot per rank: sequence-number flags with
  deadlines, and the header check, done before any data is read.
- direct.py: what every direct road shares, broadcast and barrier;
  allreduce.py, gather.py, scatter.py: the other collectives; stage.py:
  staging; by_ring.py and pipe.py: the staged-ring and pipe roads; cma.py:
  private all-gather pieces read in place.
- hier.py: several nodes: direct within each node, the ring between them.
"""
from __future__ import annotations

import numpy as np

from ..roads import DIRECT_ROADS
from .cma import probe
from .direct import Direct
from .heap import Heap
from .hier import Hierarchy
from .signals import Signals

__all__ = ["Symmetric", "Heap", "Direct", "Signals", "stages"]


def stages(mode: str, algorithm: str, world_size: int, tuning, forced_direct: bool) -> bool:
    """Whether a communicator stages ordinary host arrays: ``mode`` "1" (or a forced
    direct road) always, "0" never, "auto" where the stage limits were measured
    (a node of ``tuning.stage_ranks`` ranks; ``Symmetric.single_node`` is checked
    once the node is known). Every rank decides alike: set the mode alike everywhere."""
    if algorithm != "ring" or mode == "0":
        return False
    return forced_direct or mode == "1" or world_size == tuning.stage_ranks


class Symmetric:
    """A communicator's side on its node's heap: heap, signals, the direct roads, the hierarchy.

    Args:
      world: the communicator's bootstrap (collectives/bootstrap).
      tuning: its Tuning.
      policy: its WaitPolicy.
      direct: take the direct roads for heap arrays (False for the baselines, which
        get heap arrays from ``alloc`` but run their own collectives).
      stage: ordinary host arrays too, copied into the stage window.
      forced: {collective: Road} forced on every call (roads.parse).
      make_rail: makes a rail's Communicator from its bootstrap (several nodes, hier.py).
    """

    def __init__(self, world, tuning, policy, *, direct: bool = True, stage: bool = False, forced=None,
                 make_rail=None):
        self.node = node = world.node(tuning.node_size)
        self.rank = world.rank
        self.heap = Heap(node, tuning.shm_dir)
        ranks = node.allgather_obj(world.rank)
        self.signals = Signals(self.heap, ranks, policy)
        # a forced direct road applies within the node (a forced hier is the whole call's)
        self.direct = Direct(self.heap, self.signals, tuning, {k: r for k, r in (forced or {}).items()
                                                                if r in DIRECT_ROADS})
        self.single_node = node.size == world.size
        self.hier = None if self.single_node else Hierarchy(world, self, ranks, make_rail)
        self.enabled = direct and (self.single_node or self.hier.usable)
        self.stage = stage
        if stage:  # large all-gather pieces read in place where the kernel allows (cma.py)
            self.direct.pids = probe(node, bool(tuning.cma))

    def alloc(self, shape, dtype) -> np.ndarray:
        """An array in the heap (a collective call over the node)."""
        return self.heap.alloc(shape, dtype)

    def takes(self, x) -> bool:
        """Whether a collective on ``x`` (a numpy array) takes a direct road: ``x`` is in
        the heap, or ordinary arrays are staged."""
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

    def barrier(self, ctx, hdr):
        if self.hier is not None:
            return self.hier.barrier(ctx, hdr)
        return self.direct.barrier(ctx, hdr)

    def close(self) -> None:
        if self.hier is not None:
            self.hier.close()
        self.heap.close()
        self.node.close()
