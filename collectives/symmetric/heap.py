"""The symmetric heap: windows of shared memory that every rank of a node maps.

Each ``alloc`` is one window (shm.py: one segment per node rank, every peer's
mapped into this process; a collective call over the node), so ranks that
allocate the same shapes in the same order hold buffers at the same place in
their segments.

A buffer is found again from an array by its root (the array that wraps the
window is every view's ``base``) and, for the byte offset, by a cache keyed
on the array object: ``__array_interface__`` costs ~4 us, a dict lookup ~0.1 us.
"""
from __future__ import annotations

import numpy as np

from .shm import Segments

CACHE_LINE = 64
_MAX_CACHED = 4096  # arrays remembered by id; cleared past this (views made per call)


class Window:
    """One window: this rank's segment and a view of every peer's."""

    def __init__(self, maps, rank: int, index: int):
        self.maps = maps
        self.index = index
        self.peers = [m.array for m in maps]  # uint8 arrays, one per node rank
        self.mine = self.peers[rank]
        self.nbytes = self.mine.nbytes

    def free(self) -> None:
        if self.maps:
            self.peers, self.mine = [], None
            for m in self.maps:
                m.close()
            self.maps = []


class Heap:
    """Windows of one node, and where an array lives in them.

    Args:
      node: the node's bootstrap (collectives/bootstrap); collective calls
        (``alloc``, ``scratch``) must be made by every rank of it.
      shm_dir: where the segments live (the tuning table's shm_dir).
    """

    def __init__(self, node, shm_dir: str = "/dev/shm"):
        self.node = node
        self.rank, self.size = node.rank, node.size
        self.segments = Segments(node, shm_dir)
        self.windows: list[Window | None] = []
        self._roots: dict[int, Window] = {}  # id(the root array, its window view or their buffer) -> window
        self._keyed: list = []  # the objects _roots is keyed by, alive till close: their ids stay theirs
        self._where: dict[int, tuple] = {}  # id(array) -> (array, window index, byte offset)
        self._scratch: dict[str, Window] = {}
        self._spans: list[tuple[int, Window]] = []  # (address of this rank's segment, window) of alloc's windows

    def window(self, nbytes: int) -> Window:
        index = len(self.windows)
        w = Window(self.segments.window(max(int(nbytes), CACHE_LINE), index), self.rank, index)
        self.windows.append(w)
        return w

    def alloc(self, shape, dtype) -> np.ndarray:
        """A numpy array in a new window of the heap (collective over the node)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        w = self.window(count * dtype.itemsize)
        root = w.mine[:count * dtype.itemsize].view(dtype)
        # keyed by id, so the keys are kept: a root that died would leave its id to some new
        # array (a torch tensor's .numpy() view), which would then seem to be in this window
        keys = [w.mine, root] + ([root.base] if root.base is not None else [])
        for k in keys:
            self._roots[id(k)] = w
        self._keyed += keys
        self._spans.append((w.mine.__array_interface__["data"][0], w))
        arr = root.reshape(shape)
        return arr

    def scratch(self, nbytes: int, name: str = "scratch") -> Window:
        """A heap window of at least ``nbytes`` per rank, grown (collectively) on demand.
        Every rank must ask for the same size at the same point (callers ask after
        the header check, with sizes from the agreed header). ``name`` keeps
        separate windows apart (reduced segments; staged inputs)."""
        s = self._scratch.get(name)
        if s is None or s.nbytes < nbytes:
            if s is not None:
                self.windows[s.index] = None
                s.free()
            # powers of two: a sweep of sizes reallocates a few times, not at every size
            s = self._scratch[name] = self.window(max(1 << 16, 1 << (int(nbytes) - 1).bit_length()))
        return s

    def locate(self, x):
        """(window index, byte offset) of ``x`` in this rank's segment, or None
        when ``x`` is not in the heap."""
        hit = self._where.get(id(x))
        if hit is not None and hit[0] is x:
            return hit[1]
        b = x.base
        if b is None or type(x) is not np.ndarray:
            return None
        w = self._roots.get(id(b))
        if w is None:
            w = self._roots.get(id(b.base)) if isinstance(b, np.ndarray) else None
        if w is None:  # not a numpy view of a heap array: a view of a heap tensor's memory (torch's .numpy())?
            return self._by_address(x)
        if not x.flags.c_contiguous:
            return None
        off = x.__array_interface__["data"][0] - w.mine.__array_interface__["data"][0]
        if not 0 <= off <= w.nbytes - x.nbytes:
            return self._by_address(x)
        if len(self._where) > _MAX_CACHED:
            self._where.clear()
        loc = (w.index, off)
        self._where[id(x)] = (x, loc)
        return loc

    def _by_address(self, x):
        """``locate`` for an array whose numpy base is not the heap's own (a torch tensor
        from ``alloc`` seen through ``Tensor.numpy()``): memory inside one of the
        windows ``alloc`` made is in the heap, whatever object wraps it."""
        if not self._spans or not x.flags.c_contiguous:
            return None
        at = x.__array_interface__["data"][0]
        for start, w in self._spans:
            off = at - start
            if 0 <= off <= w.nbytes - x.nbytes:
                loc = (w.index, off)
                if len(self._where) > _MAX_CACHED:
                    self._where.clear()
                self._where[id(x)] = (x, loc)
                return loc
        return None

    def peer_view(self, q: int, loc, count: int, dtype) -> np.ndarray:
        """Node rank ``q``'s ``count`` elements of ``dtype`` at ``loc`` (window, offset)."""
        w = self.windows[loc[0]]
        if w is None:
            raise RuntimeError(f"heap window {loc[0]} was freed")
        off = loc[1]
        return w.peers[q][off:off + count * dtype.itemsize].view(dtype)

    def overhead_bytes(self) -> int:
        """This rank's bytes in the heap's own windows (scratch, stage, control
        slots): every window but those ``alloc`` handed out to the caller."""
        handed = {id(w) for w in self._roots.values()}
        return sum(w.nbytes for w in self.windows if w is not None and id(w) not in handed)

    def close(self) -> None:
        for w in self.windows:
            if w is not None:
                w.free()
        self.windows = []
        self._where.clear()
        self._roots.clear()
        self._keyed.clear()
        self._spans.clear()
