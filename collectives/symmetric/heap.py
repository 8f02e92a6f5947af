"""The symmetric heap: MPI-3 shared-memory windows that every rank of a node maps.

``MPI.Win.Allocate_shared`` gives each rank of a node (the ``COMM_TYPE_SHARED``
split, or every ``COLLECTIVES_NODE_SIZE`` consecutive ranks when that is set)
a segment, and ``Shared_query`` maps every peer's segment into this process:
MPI does the mapping, nothing here is home-made. Every ``alloc`` is one
window (a collective call over the node), so ranks that allocate the same
shapes in the same order hold buffers at the same place in their segments.

A buffer is found again from an array by its root (numpy keeps the array
that wraps the window as every view's ``base``) and, for the byte offset, by
a cache keyed on the array object: ``__array_interface__`` costs ~4 us,
a dict lookup ~0.1 us.
"""
from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

CACHE_LINE = 64
_MAX_CACHED = 4096  # arrays remembered by id; cleared past this (views made per call)


def node_comm(comm: MPI.Comm) -> MPI.Comm:
    """The ranks of ``comm`` that share this node's memory.

    ``COLLECTIVES_NODE_SIZE=k`` makes every k consecutive ranks one node
    (tests run the multi-node path on one machine that way); otherwise the
    ``COMM_TYPE_SHARED`` split decides.
    """
    k = os.environ.get("COLLECTIVES_NODE_SIZE")
    if k:
        k = int(k)
        if k < 1:
            raise ValueError(f"COLLECTIVES_NODE_SIZE must be >= 1, got {k}")
        return comm.Split(comm.Get_rank() // k, comm.Get_rank())
    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())


class Window:
    """One shared window: this rank's segment and a view of every peer's."""

    def __init__(self, comm: MPI.Comm, nbytes: int, index: int):
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")  # each rank's segment on its own pages
        try:
            self.win = MPI.Win.Allocate_shared(max(int(nbytes), CACHE_LINE), 1, info, comm)
        finally:
            info.Free()
        self.index = index
        self.peers = []  # uint8 arrays, one per node rank
        for q in range(comm.Get_size()):
            buf, _ = self.win.Shared_query(q)
            self.peers.append(np.frombuffer(buf, np.uint8))
        self.mine = self.peers[comm.Get_rank()]
        self.nbytes = self.mine.nbytes

    def free(self) -> None:
        if self.win is not None:
            self.peers, self.mine = [], None
            self.win.Free()
            self.win = None


class Heap:
    """Windows of one node, and where an array lives in them.

    Args:
      comm: the node communicator (see ``node_comm``); collective calls
        (``alloc``, ``scratch``) must be made by every rank of it.
    """

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.windows: list[Window | None] = []
        self._roots: dict[int, Window] = {}  # id(root array or its MPI buffer) -> window
        self._where: dict[int, tuple] = {}  # id(array) -> (array, window index, byte offset)
        self._scratch: dict[str, Window] = {}
        self._spans: list[tuple[int, Window]] = []  # (address of this rank's segment, window) of alloc's windows

    def _window(self, nbytes: int) -> Window:
        w = Window(self.comm, nbytes, len(self.windows))
        self.windows.append(w)
        return w

    def alloc(self, shape, dtype) -> np.ndarray:
        """A numpy array in a new window of the heap (collective over the node)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        w = self._window(count * dtype.itemsize)
        root = w.mine[:count * dtype.itemsize].view(dtype)
        self._roots[id(w.mine)] = w
        self._roots[id(root)] = w
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
            # (each Allocate_shared is a collective call, and Open MPI's component
            # selection inside it has crashed now and then: "free(): invalid pointer"
            # in ucp_cleanup, while the UCX one-sided component declines)
            s = self._scratch[name] = self._window(max(1 << 16, 1 << (int(nbytes) - 1).bit_length()))
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
            return None
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
        self._spans.clear()
