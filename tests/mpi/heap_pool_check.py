"""Run under mpirun -n 2: the torch heap pool (collectives/torch_backend/heap_pool.py) when one
rank keeps a tensor it handed out alive longer than the other.

Rank 0 holds on to its first tensor, rank 1 drops it, then both ask for the same size again:
rank 1 has a free block, rank 0 has none. The ranks must agree and both make a window
(a window made on one rank only would leave it waiting for the other until the deadline),
the new tensors must work as heap buffers (an all-reduce on them, checked against numpy),
and rank 1's free block must serve the next request on both once rank 0 lets go too.
Prints one JSON line per rank: {"rank", "made", "hits", "failures"}.
"""
import json

import numpy as np
import torch
from mpi4py import MPI

from collectives import Communicator
from collectives.torch_backend.heap_pool import HeapPool

world = MPI.COMM_WORLD
rank = world.rank
assert world.size == 2, "heap_pool_check.py runs on two ranks"
comm = Communicator(timeout=20)
pool = HeapPool(comm)
failures = []

first = pool.tensor(1000, torch.float32)
kept = first if rank == 0 else None
del first  # rank 1's block goes back to its free list; rank 0's stays handed out
second = pool.tensor(1000, torch.float32)  # rank 1 could take its free block: it must not alone
if (pool.made, pool.hits) != (2, 0):
    failures.append(f"after the second request: (made, hits) {(pool.made, pool.hits)}, expected (2, 0)")
second.copy_(torch.arange(1000, dtype=torch.float32) * (rank + 1))
x = second.numpy()
comm.all_reduce(x, out=x)
if not np.array_equal(x, np.arange(1000, dtype=np.float32) * 3):
    failures.append("the all-reduce on the second heap tensors is wrong")
del kept, second  # now every rank has free blocks of this size
third = pool.tensor(1000, torch.float32)
if (pool.made, pool.hits) != (2, 1):
    failures.append(f"after the third request: (made, hits) {(pool.made, pool.hits)}, expected (2, 1)")
del third
comm.close()
print(json.dumps({"rank": rank, "made": pool.made, "hits": pool.hits, "failures": failures}), flush=True)
