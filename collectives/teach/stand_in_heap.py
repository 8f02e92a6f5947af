"""A stand-in for the node's symmetric heap (symmetric/heap.py), for explain's simulated ranks.

Under mpirun the heap is shared-memory segments that every rank of a node
maps. explain's ranks are threads of one process, so a window is simply one
numpy array per rank that every thread can see: ``StandInHeap`` gives
``Direct`` and ``Signals`` the interface of ``Heap`` (``window``, ``alloc``,
``scratch``, ``locate``, ``peer_view``, ``node.barrier``) over such arrays
(explain_direct.py drives the real direct code over it).
"""
from __future__ import annotations

import threading

import numpy as np


class _Window:
    """One rank's view of a shared window: every rank's segment (``peers``) and its own."""

    def __init__(self, segments: list, rank: int, index: int):
        self.peers, self.mine, self.index = segments, segments[rank], index
        self.nbytes = self.mine.nbytes


class StandInNode:
    """What the threads of one simulated node share: the windows and a barrier."""

    def __init__(self, world: int, timeout: float):
        self.world, self.timeout = world, timeout
        self.segments: list = []  # per window: one uint8 array per rank
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(world)

    def wait(self) -> None:
        self.barrier.wait(self.timeout)


class _Barrier:
    """The node bootstrap's barrier, for Signals."""

    def __init__(self, node: StandInNode):
        self.barrier = node.wait


class StandInHeap:
    """The interface of symmetric/heap.Heap over numpy arrays shared by threads.

    Args:
      node: the shared state of the simulated node.
      rank: this thread's rank.
    """

    def __init__(self, node: StandInNode, rank: int):
        self.shared, self.rank, self.size = node, rank, node.world
        self.node = _Barrier(node)
        self.windows: list = []
        self._scratch: dict = {}

    def window(self, nbytes: int) -> _Window:
        """The next window (every rank asks in the same order, as for MPI's collective call)."""
        i = len(self.windows)
        with self.shared.lock:
            if i == len(self.shared.segments):
                self.shared.segments.append([np.zeros(max(int(nbytes), 64), np.uint8) for _ in range(self.size)])
            segments = self.shared.segments[i]
        w = _Window(segments, self.rank, i)
        self.windows.append(w)
        return w

    def alloc(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return self.window(count * dtype.itemsize).mine[:count * dtype.itemsize].view(dtype).reshape(shape)

    def scratch(self, nbytes: int, name: str = "scratch") -> _Window:
        s = self._scratch.get(name)
        if s is None or s.nbytes < nbytes:
            s = self._scratch[name] = self.window(max(nbytes, 1 << 16))
        return s

    def locate(self, x):
        """(window, byte offset) of ``x`` in this rank's segments, or None."""
        at = x.__array_interface__["data"][0]
        for w in self.windows:
            off = at - w.mine.__array_interface__["data"][0]
            if 0 <= off <= w.nbytes - x.nbytes:
                return w.index, off
        return None

    def peer_view(self, q: int, loc, count: int, dtype) -> np.ndarray:
        off = loc[1]
        return self.windows[loc[0]].peers[q][off:off + count * np.dtype(dtype).itemsize].view(dtype)
