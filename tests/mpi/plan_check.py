"""Cached per-call plans under mpirun (collectives/plan.py): many repeated calls on
heap arrays (the direct path), ordinary arrays (ring/small road) and through the
MPI baseline, each checked against numpy, then a mismatched call, which must
raise MismatchError on every rank. Prints one JSON line per rank.

  mpirun -n 2 python tests/mpi/plan_check.py
"""
import json

import numpy as np
from mpi4py import MPI

from collectives import Communicator
from collectives.errors import MismatchError

world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
failures, raised = [], {}


def check(name, got, want):
    if not np.array_equal(got, want):
        failures.append(f"{name}: got {np.asarray(got)[:4]}, want {np.asarray(want)[:4]}")


def run(tag, comm, make):
    """100 rounds of every collective on the same arrays, then one rank all-reduces fewer elements."""
    x, o, g, rs = make(24), make(24), make(24 * n), make(24 // n if 24 % n == 0 else 24)
    x2 = make(12)
    ranks = np.arange(n, dtype=np.float32)[:, None] + 1
    for i in range(100):
        x[:] = rank + 1 + i
        comm.all_reduce(x, out=o)
        check(f"{tag} all_reduce {i}", o, np.full(24, (ranks.sum() + n * i)))
        comm.all_reduce(x, out=x, op="max")
        check(f"{tag} all_reduce max {i}", x, np.full(24, n + i))
        comm.all_gather(x, out=g)
        check(f"{tag} all_gather {i}", g, np.full(24 * n, n + i))
        if 24 % n == 0:
            comm.reduce_scatter(g[:24], out=rs)
            check(f"{tag} reduce_scatter {i}", rs, np.full(24 // n, n * (n + i)))
        x[:] = rank
        comm.broadcast(x, root=n - 1, out=x)
        check(f"{tag} broadcast {i}", x, np.full(24, n - 1))
        comm.barrier()
    try:
        if rank == n - 1:
            comm.all_reduce(x2, out=x2)
        else:
            comm.all_reduce(x, out=x)
        failures.append(f"{tag}: a mismatched call after 600 cached calls did not raise")
    except MismatchError as e:
        raised[tag] = str(e)


heap = Communicator(timeout=30)
run("heap", heap, lambda k: heap.alloc((k,), np.float32))
heap.close()
plain = Communicator(timeout=30)
run("ordinary", plain, lambda k: np.zeros(k, np.float32))
plain.close()
mpi = Communicator(algorithm="mpi", timeout=30)
run("mpi", mpi, lambda k: np.zeros(k, np.float32))
mpi.close()
# plans found by their arrays (plan_cache.shape_key): alloc forgets them, and the heap's arrays plan anew
fresh = Communicator(timeout=30)
x, o = np.full(64, rank + 1.0, np.float32), np.empty(64, np.float32)
for _ in range(3):
    fresh.all_reduce(x[:], out=o[:])
check("fresh views", o, np.full(64, 3.0, np.float32))
shapes = [len(fresh.shapes)]
h = fresh.alloc((64,), np.float32)
shapes.append(len(fresh.shapes))
h[:] = rank + 2.0
for _ in range(3):
    fresh.all_reduce(h[:], out=o[:])
check("fresh views of a heap array", o, np.full(64, 5.0, np.float32))
fresh.close()
print(json.dumps({"rank": rank, "nfail": len(failures), "failures": failures[:10], "raised": raised,
                  "shapes": shapes}), flush=True)
