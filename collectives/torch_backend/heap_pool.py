"""FSDP2's communication buffers in the symmetric heap, through a caching allocator.

``fully_shard(...).set_allocate_memory_from_process_group_for_comm(True)``
makes FSDP2 ask the group (``supports_tensor_alloc`` / ``allocate_tensor``)
for its all-gather outputs and reduce-scatter inputs. Served from the heap,
those collectives read peers' buffers in place (the direct roads) instead
of staging them.

A heap window is a collective to make (every rank of the node maps every
peer's) and lives until the group closes, so buffers are cached: a block
goes back to a free list by size when the tensor object handed out for it
dies (``weakref.finalize``; torch keeps a tensor object alive while views of
it live, while numpy views of its memory, which the library's caches keep,
hold only the storage), and the next request of that size takes it without
a window. FSDP2 asks in the same order with the same sizes on every rank,
but when a block comes back depends on when the tensor object handed out for
it dies, and one rank may hold a reference a few calls longer than the others
(its own code, a cache, the garbage collector's timing). So the ranks agree
on every request whether each has a free block of that size (a one-integer
all-reduce, MIN): if any has none, every rank makes a window and a free block
stays free, so a window is never made on some ranks only, which would leave
them waiting for the others until the deadline. (The progress thread keeps no
task past its collective: work.py.)
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from ..dtypes import carrier, torch_dtypes

_ROWS = torch_dtypes(torch)
ALIGN = 64  # bytes; block sizes are multiples of it (every item size divides it)


class HeapPool:
    """Heap blocks by size, handed out as CPU tensors and taken back when those die.

    Args:
      comm: the group's Communicator; its ``alloc`` makes new blocks (collectively).

    Attributes:
      made: blocks made so far (heap windows); hits: requests served from the free lists.
    """

    def __init__(self, comm):
        self.comm = comm
        self._free: dict[int, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self._have = np.zeros(1, np.int32)  # the agreement's one integer (the same array: a plan hit)
        self.made = self.hits = 0

    def tensor(self, numel: int, dtype) -> torch.Tensor:
        """A 1-D CPU tensor of ``numel`` elements of torch dtype ``dtype`` in the heap."""
        row = _ROWS.get(dtype)
        if row is None:
            raise TypeError(f"allocate_tensor on rank {self.comm.rank}: unsupported torch dtype {dtype}")
        nbytes = max(ALIGN, -(-int(numel) * row.numpy.itemsize // ALIGN) * ALIGN)
        with self._lock:
            blocks = self._free.get(nbytes)
            block = blocks.pop() if blocks else None
        self._have[0] = block is not None
        self.comm.all_reduce(self._have, op="min", out=self._have)  # does every rank have one?
        if not self._have[0]:
            if block is not None:  # a peer has none: ours stays free for a later request
                self._release(nbytes, block)
            block = self.comm.alloc((nbytes,), np.uint8)  # a new window: every rank makes one here
            self.made += 1
        else:
            self.hits += 1
        t = torch.from_numpy(block[:int(numel) * row.numpy.itemsize].view(carrier(row.numpy)))
        t = t if t.dtype == dtype else t.view(dtype)
        # back to the free list when this tensor object dies: its views (FSDP2's narrow of
        # its own shard) keep it alive, numpy views of its memory (the library's caches) do not
        weakref.finalize(t, self._release, nbytes, block)
        return t

    def _release(self, nbytes: int, block: np.ndarray) -> None:
        with self._lock:
            self._free.setdefault(nbytes, []).append(block)

    def cached_bytes(self) -> int:
        """Bytes in free blocks."""
        with self._lock:
            return sum(k * len(v) for k, v in self._free.items())
