"""Ordinary numpy arrays, paired in one launch: staged through the symmetric heap
(COLLECTIVES_STAGE=1), the default ring over MPI point-to-point, and MPI's own
collective (Communicator(algorithm="mpi")), call by call in turn.

  mpirun -n 2 python tests/mpi/symmetric_stage_ab.py [sizes in KiB...]
Prints, on rank 0, per collective and size: medians in us and MPI/staged,
MPI/ring as the median of the per-round ratios (>1: faster than MPI).
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from collectives import Communicator

world = MPI.COMM_WORLD
os.environ["COLLECTIVES_STAGE"] = "1"
staged = Communicator(timeout=120)
del os.environ["COLLECTIVES_STAGE"]
ring = Communicator(timeout=120)
mpi = Communicator(algorithm="mpi", timeout=120, verify=False)
n, rank = ring.size, ring.rank
assert staged._symmetric is not None and staged._symmetric.stage and ring._symmetric is None
sizes = [int(s) for s in sys.argv[1:]] or [1, 64, 1024]

for kib in sizes:
    count = kib * 256
    x, o, g = np.ones(count, np.float32), np.empty(count, np.float32), np.empty(count * n, np.float32)
    rs = np.empty(count // n, np.float32)
    reps = 200 if kib <= 64 else 40 if kib <= 4096 else 8
    for name, call in (("all_reduce", lambda c: c.all_reduce(x, out=o)),
                       ("reduce_scatter", lambda c: c.reduce_scatter(x, out=rs)),
                       ("all_gather", lambda c: c.all_gather(x, out=g))):
        ts = {"staged": [], "ring": [], "mpi": []}
        for _ in range(reps):
            for k, c in (("staged", staged), ("ring", ring), ("mpi", mpi)):
                world.Barrier()
                t = time.perf_counter()
                call(c)
                ts[k].append(time.perf_counter() - t)
        m = np.array(ts["mpi"])
        if rank == 0:
            print(f"{name:15s} {kib:6d} KiB  staged {np.median(ts['staged']) * 1e6:9.1f}  ring "
                  f"{np.median(ts['ring']) * 1e6:9.1f}  mpi {np.median(m) * 1e6:9.1f} us  "
                  f"mpi/staged {np.median(m / np.array(ts['staged'])):5.2f}x  "
                  f"mpi/ring {np.median(m / np.array(ts['ring'])):5.2f}x", flush=True)
staged.close()
ring.close()
mpi.close()
