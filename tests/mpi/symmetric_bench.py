"""A/B timings under mpirun (ratios only): the direct path on heap buffers
against MPI's own collective and our ring, interleaved in one launch.

  mpirun -n 2 python tests/mpi/symmetric_bench.py [sizes in KiB...]
Prints, on rank 0, one line per collective and size: median microseconds and
MPI/direct, MPI/ring ratios (>1: faster than MPI).
"""
import sys
import time

import numpy as np
from mpi4py import MPI

from collectives import Communicator

world = MPI.COMM_WORLD
ring = Communicator(timeout=60)
mpi = Communicator(algorithm="mpi", timeout=60, verify=False)
n, rank = ring.size, ring.rank
sizes = [int(s) for s in sys.argv[1:]] or [1, 64, 1024, 4096]


def timeit(fn, reps):
    ts = []
    for _ in range(reps):
        world.Barrier()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return np.median(ts) * 1e6


for kib in sizes:
    count = kib * 256
    sx = ring.alloc((count,), np.float32)
    sx[:] = 1
    px = np.ones(count, np.float32)
    so, po = ring.alloc((count,), np.float32), np.empty(count, np.float32)
    sg, pg = ring.alloc((count * n,), np.float32), np.empty(count * n, np.float32)
    rs_o = np.empty(count // n, np.float32)
    reps = 200 if kib <= 64 else 30
    cases = {
        "all_reduce": (lambda: ring.all_reduce(sx, out=so), lambda: mpi.all_reduce(px, out=po),
                       lambda: ring.all_reduce(px, out=po)),
        "reduce_scatter": (lambda: ring.reduce_scatter(sx, out=rs_o), lambda: mpi.reduce_scatter(px, out=rs_o),
                           lambda: ring.reduce_scatter(px, out=rs_o)),
        "all_gather": (lambda: ring.all_gather(sx, out=sg), lambda: mpi.all_gather(px, out=pg),
                       lambda: ring.all_gather(px, out=pg)),
    }
    for name, (d, m, r) in cases.items():
        td, tm, tr = [], [], []
        for _ in range(3):  # alternate the variants
            td.append(timeit(d, reps))
            tm.append(timeit(m, reps))
            tr.append(timeit(r, reps))
        td, tm, tr = min(td), min(tm), min(tr)
        if rank == 0:
            print(f"{name:15s} {kib:6d} KiB  direct {td:9.1f} us  mpi {tm:9.1f} us  ring {tr:9.1f} us  "
                  f"mpi/direct {tm / td:5.2f}x  mpi/ring {tm / tr:5.2f}x", flush=True)
ring.close()
mpi.close()
