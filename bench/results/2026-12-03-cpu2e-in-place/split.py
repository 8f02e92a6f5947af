"""Where a two-rank in-place all-reduce's time goes (default 4 MiB, the staging communicator's
staged-ring, i.e. the pair after the shared-memory header check): the call, the time inside
Context.wait (polling MPI's requests), inside the reduction, inside the pair exchange itself,
posting sends and receives, and the shared-memory header wait; 100 calls after 10 warm-up calls,
per call, each rank.

    mpirun -n 2 python split.py [BYTES]
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from collectives import Communicator  # noqa: E402
from collectives import context  # noqa: E402
from collectives.host import pair  # noqa: E402
from collectives.symmetric import signals  # noqa: E402

spent = {}


def timed(owner, name, label):
    f = getattr(owner, name)
    spent[label] = 0.0

    def g(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[label] += time.perf_counter() - t0
    setattr(owner, name, g)


timed(context.Context, "wait", "waits")
timed(context.Context, "reduce", "reduction")
timed(context.Context, "isend", "posting sends")
timed(context.Context, "irecv", "posting receives")
timed(pair, "_all_reduce", "the pair exchange")
timed(signals.Signals, "wait_all", "shared-memory header wait")
w = MPI.COMM_WORLD
c = Communicator()
y = np.ones((int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 20) // 4, np.float32)
for _ in range(10):
    c.all_reduce(y, out=y)
    y[:] = 1
for k in spent:
    spent[k] = 0.0
K = 100
w.Barrier()
t0 = time.perf_counter()
for _ in range(K):
    c.all_reduce(y, out=y)
total = time.perf_counter() - t0
parts = ", ".join(f"{k} {v / K * 1e6:.1f}" for k, v in spent.items())
print(f"rank {w.rank} ({c.road_taken().value}): call {total / K * 1e6:.1f} us; {parts}", flush=True)
