"""One correctness line per collective: our ring against numpy and MPI's own.

    mpirun -n 2 python examples/demo.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from collectives import Communicator  # noqa: E402  (before mpi4py: see collectives/__init__)
from mpi4py import MPI  # noqa: E402

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
ring, mpi = Communicator(), Communicator(algorithm="mpi")
count = 1_000_003  # prime: segments of different sizes, several chunks each


def make(r, m=count):
    return (((np.arange(m) * 7 + r * 13) % 17) - 8).astype(np.float32)


full = sum(make(r).astype(np.float64) for r in range(n)).astype(np.float32)
counts = [count // n + (1 if r < count % n else 0) for r in range(n)]
lo = sum(counts[:rank])
piece = make(rank, counts[rank])
checks = {
    "all_reduce": (lambda c: c.all_reduce(make(rank)), full),
    "reduce_scatter": (lambda c: c.reduce_scatter(make(rank), counts=counts), full[lo:lo + counts[rank]]),
    "all_gather": (lambda c: c.all_gather(piece, counts=counts),
                   np.concatenate([make(r, counts[r]) for r in range(n)])),
    "broadcast": (lambda c: c.broadcast(make(rank), root=n - 1), make(n - 1)),
}
bad = 0
for name, (call, want) in checks.items():
    got, base = call(ring), call(mpi)
    ok_np = np.array_equal(got, want)
    ok_mpi = got.tobytes() == base.tobytes()
    ok = world.allreduce(int(ok_np and ok_mpi), op=MPI.MIN)
    bad += not ok
    if rank == 0:
        print(f"{name:>15}: ring on {n} ranks, {count} float32 -> "
              f"{'OK' if ok else 'WRONG'} (equal to numpy: {ok_np}, bit-identical to MPI's own: {ok_mpi})")
ring.close()
mpi.close()
sys.exit(1 if bad else 0)
