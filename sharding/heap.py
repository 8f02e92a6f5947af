"""Where a ZeroOptimizer's communicated buffers live: the node's symmetric heap.

When the communicator runs over MPI on host arrays, the buffers ZeRO's
collectives read are allocated with ``comm.alloc`` (collectives/symmetric),
so its reduce-scatters, all-reduces and all-gathers read the peers' buffers
in place instead of going around the ring. Per stage (see policy.py):

    stage  in the heap
    0      the full gradient (all-reduced in place)
    1      the full gradient (reduce-scattered) and the full weights
           (their owned range is what step() all-gathers, in place)
    2      the full weights, and the reduce-scatter inputs (a pool, below)
    3      the owned weight shard (what every use all-gathers), and the pool

Outputs that are made per call (a stage-3 gathered unit, a stage-1 reduced
shard) stay ordinary arrays: the direct path writes them straight, and heap
windows live until the communicator closes, so a window per call would grow
without bound. Stage 2-3 gradients are reduce-scattered from a pool of
``POOL`` heap buffers sized to the largest unit, taken in turn: a buffer
whose earlier reduce-scatter is still in flight is waited for (and folded
into its unit) before it is refilled, so memory stays bounded as with
DeepSpeed's reduce buckets.

In-process communicators (simulate.py), GPU arrays and ``symmetric=False``
keep plain numpy (cupy) arrays. Every rank must decide alike: ``alloc`` is a
collective call over the node. The heap arrays are unmapped by
``comm.close()``: close the communicator after the optimizer's last use.
"""
from __future__ import annotations

import numpy as np

POOL = 2  # reduce-scatter inputs in flight at once (stages 2-3): one folding, one filling


def heap_available(comm, xp) -> bool:
    """Whether ``comm`` can allocate symmetric host arrays: an MPI communicator
    with ``alloc`` (not an in-process one), for numpy buffers."""
    transport = getattr(comm, "transport", None)
    return xp is np and hasattr(comm, "alloc") and getattr(transport, "comm", None) is not None


def use_heap(comm, xp, symmetric: bool | None) -> bool:
    """The rule of ZeroOptimizer's ``symmetric`` argument: None takes the heap where
    available, True requires it, False never takes it."""
    ok = heap_available(comm, xp)
    if symmetric and not ok:
        raise ValueError(f"symmetric=True needs a Communicator over MPI with host (numpy) buffers; got "
                         f"{type(comm).__name__} over {type(getattr(comm, 'transport', None)).__name__} "
                         f"with {getattr(xp, '__name__', xp)} arrays")
    return ok if symmetric is None else bool(symmetric)


class Buffers:
    """Allocates the optimizer's communicated buffers: in the heap, or plain.

    Args:
      comm: the Communicator.
      xp: numpy or cupy.
      heap: allocate with ``comm.alloc`` (see ``use_heap``).
    """

    def __init__(self, comm, xp, heap: bool):
        self.comm, self.xp, self.heap = comm, xp, heap

    def zeros(self, count: int, dtype):
        """A zeroed flat array of ``count`` elements (in the heap when ``heap``)."""
        if not self.heap:
            return self.xp.zeros(count, dtype)
        a = self.comm.alloc((count,), dtype)
        a[...] = 0
        return a

    def copy_of(self, a, dtype=None):
        """A copy of flat ``a`` as ``dtype`` (in the heap when ``heap``), a fresh array either way."""
        dtype = np.dtype(dtype) if dtype is not None else a.dtype
        if not self.heap:
            return a.astype(dtype)  # astype copies by default
        out = self.comm.alloc((a.size,), dtype)
        out[...] = a
        return out


class InputPool:
    """Heap buffers that stage 2-3 gradient reduce-scatters read, taken in turn.

    Args:
      buffers: a Buffers with ``heap`` set.
      count: elements of the largest unit (padded).
      dtype: the reduce dtype.
    """

    def __init__(self, buffers: Buffers, count: int, dtype):
        self.arrays = [buffers.zeros(count, dtype) for _ in range(POOL)]
        self.holder: list = [None] * POOL  # (unit, Pending) whose reduce-scatter reads the buffer
        self.next = 0

    def take(self, count: int, fold):
        """A zeroed buffer of ``count`` elements whose earlier reduce-scatter is done:
        ``fold(unit)`` is called first when it is still pending. Returns (index, view)."""
        i = self.next
        self.next = (i + 1) % POOL
        held = self.holder[i]
        if held is not None:
            unit, pend = held
            if pend in unit.pending:
                fold(unit)
            self.holder[i] = None
        view = self.arrays[i][:count]
        view[...] = 0
        return i, view

    def hold(self, i: int, unit, pend) -> None:
        """Record that ``pend`` (of ``unit``) reads buffer ``i`` until it is folded."""
        self.holder[i] = (unit, pend)

    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays)
