"""The 4 MiB all-reduce, out of place, in one launch: ours on the same objects and on fresh
views x[:], out[:] per call, raw MPI on the same and on fresh views, taking turns (nine rounds
of 30 calls); the median per call and the median paired ratio against raw MPI's same objects.

    mpirun -n 2 python fresh-4m.py [BYTES]
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from collectives import Communicator  # noqa: E402

w = MPI.COMM_WORLD
c = Communicator()
n = (int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 20) // 4
x, out = np.ones(n, np.float32), np.empty(n, np.float32)
calls = {"ring, same": lambda: c.all_reduce(x, out=out), "ring, fresh": lambda: c.all_reduce(x[:], out=out[:]),
         "mpi, same": lambda: w.Allreduce(x, out), "mpi, fresh": lambda: w.Allreduce(x[:], out[:])}
times = {k: [] for k in calls}
for _ in range(9):
    for k, f in calls.items():
        for _ in range(3):
            f()
        w.Barrier()
        t0 = time.perf_counter()
        for _ in range(30):
            f()
        w.Barrier()
        times[k].append((time.perf_counter() - t0) / 30 * 1e6)
if w.rank == 0:
    m = np.array(times["mpi, same"])
    for k, v in times.items():
        print(f"{k:12s} median {np.median(v):8.1f} us  vs raw MPI {np.median(m / np.array(v)):.2f}x")
