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

import warnings

import numpy as np

POOL = 2  # reduce-scatter inputs in flight at once (stages 2-3): one folding, one filling
PAGE = 4096
MARGIN = 1 << 20  # the heap's own windows: control slots, scratch


def heap_available(comm, xp) -> bool:
    """Whether ``comm`` can allocate symmetric host arrays: a communicator whose ranks
    met through a bootstrap (not an in-process one), for numpy buffers."""
    return xp is np and hasattr(comm, "alloc") and getattr(comm, "bootstrap", None) is not None


def heap_bytes(policy, layouts, param_dtype, reduce_dtype) -> int:
    """Bytes per rank that a ZeroOptimizer's heap buffers take (the table above), every
    window rounded up to whole pages, plus the heap's own windows."""
    def window(nbytes):
        return -(-max(int(nbytes), 64) // PAGE) * PAGE
    p, g = np.dtype(param_dtype).itemsize, np.dtype(reduce_dtype).itemsize
    total = MARGIN
    for lay in layouts:
        if not policy.shard_grads:  # stages 0-1: the full gradient, reduced in place
            total += window(lay.padded * g)
        if policy.shard_state and not policy.shard_weights:  # stages 1-2: the full weights
            total += window(lay.padded * p)
        if policy.shard_weights:  # stage 3: the owned shard
            total += window(lay.padded // lay.world * p)
    if policy.reduce_per_unit and layouts:  # stages 2-3: the reduce-scatter inputs
        total += POOL * window(max(lay.padded for lay in layouts) * g)
    return total


def use_heap(comm, xp, symmetric: bool | None, need=None) -> bool:
    """The rule of ZeroOptimizer's ``symmetric`` argument: None takes the heap where
    available and where the node's shared memory holds ``need()`` bytes per rank (else
    ordinary buffers, with one warning), True requires it, False never takes it. Every
    rank decides alike (the fit is agreed)."""
    ok = heap_available(comm, xp)
    if symmetric and not ok:
        raise ValueError(f"symmetric=True needs a Communicator with a bootstrap and host (numpy) buffers; got "
                         f"{type(comm).__name__} over {type(getattr(comm, 'transport', None)).__name__} "
                         f"with {getattr(xp, '__name__', xp)} arrays")
    if symmetric is not None or not ok:
        return ok if symmetric is None else bool(symmetric)
    if need is not None:
        fits, short = comm.heap_fits(need())
        if not fits:
            warnings.warn(f"ZeroOptimizer: the node's shared memory is short ({short}); its buffers stay "
                          f"ordinary arrays (symmetric=False), off the direct roads", RuntimeWarning, stacklevel=3)
            return False
    return True


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
