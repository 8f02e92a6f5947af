"""A two-rank in-place all-reduce four ways, taking turns in one launch: ours (staging
communicator: the staged-ring, i.e. the pair after the shared-memory header check), ours
never staging (the pair after MPI's header agreement), the same exchange written with bare
mpi4py calls (send the peer's half, receive ours into scratch, add, send it back, receive the
peer's result once our first send is done), and raw MPI's Allreduce(MPI.IN_PLACE). Nine rounds
of 30 calls; median and lowest per call, and the median paired ratio against raw MPI.

    mpirun -n 2 python exchange.py BYTES
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from collectives import Communicator  # noqa: E402
w = MPI.COMM_WORLD
r, p = w.rank, 1 - w.rank
ours, never_staging = Communicator(), Communicator(stage="0")
n = int(sys.argv[1]) // 4
h = n // 2
y, scratch = np.ones(n, np.float32), np.empty(h, np.float32)
mine, theirs = slice(r * h, (r + 1) * h), slice(p * h, (p + 1) * h)


def bare():
    s = w.Isend(y[theirs], p, 1)
    f = w.Irecv(scratch, p, 1)
    f.Wait()
    np.add(y[mine], scratch, out=y[mine])
    s2 = w.Isend(y[mine], p, 2)
    s.Wait()
    w.Irecv(y[theirs], p, 2).Wait()
    s2.Wait()


calls = {"ours": lambda: ours.all_reduce(y, out=y), "ours, never staging": lambda: never_staging.all_reduce(y, out=y),
         "bare mpi4py exchange": bare, "raw MPI": lambda: w.Allreduce(MPI.IN_PLACE, y)}
times = {k: [] for k in calls}
for _ in range(9):
    for k, f in calls.items():
        y[:] = 1
        for _ in range(3):
            f()
        w.Barrier()
        t0 = time.perf_counter()
        for _ in range(30):
            f()
        w.Barrier()
        times[k].append((time.perf_counter() - t0) / 30 * 1e6)
if r == 0:
    mpi = np.array(times["raw MPI"])
    for k, v in times.items():
        print(f"{k:22s} median {np.median(v):8.1f} us  lowest {min(v):8.1f} us  vs raw MPI "
              f"{np.median(mpi / np.array(v)):.2f}x")
    print("roads:", ours.road_taken().value, never_staging.road_taken().value)
