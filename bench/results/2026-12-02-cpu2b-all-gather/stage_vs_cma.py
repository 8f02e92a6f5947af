"""Ordinary float32 calls on the same arrays, in turns: raw mpi4py against ringzero under tuning
files (file:PATH), forced roads (a road's name) or the defaults (default). Each case's time is the
median over 9 rounds of the slowest rank's mean; the ratio is the median of round-by-round raw/this
(> 1: faster than raw MPI).

    mpirun -n 2 python stage_vs_cma.py all_gather 32768,65536 file:cma0.json,file:staged.json,default
"""
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../.."))
from collectives import Communicator  # noqa: E402
from collectives.roads import Road  # noqa: E402

w = MPI.COMM_WORLD
op, sizes, variants = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], sys.argv[3].split(",")
comms = {}
for v in variants:
    if v == "default":
        comms[v] = Communicator()
    elif v.startswith("file:"):
        os.environ["RINGZERO_TUNING"] = v[5:]
        comms[v] = Communicator()
        del os.environ["RINGZERO_TUNING"]
    else:
        comms[v] = Communicator(road={op: Road(v)})


def timeit(fn, k):
    w.Barrier()
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    return w.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX)


for nb in sizes:
    n, size = nb // 4, w.size
    if op == "all_gather":
        x, o = np.ones(n // size, np.float32), np.empty(n, np.float32)
        raw, call = (lambda: w.Allgather(x, o)), (lambda c: lambda: c.all_gather(x, out=o))
    elif op == "reduce_scatter":
        x, o = np.ones(n, np.float32), np.empty(n // size, np.float32)
        raw, call = (lambda: w.Reduce_scatter_block(x, o)), (lambda c: lambda: c.reduce_scatter(x, out=o))
    else:
        x, o = np.ones(n, np.float32), np.empty(n, np.float32)
        raw, call = (lambda: w.Allreduce(x, o)), (lambda c: lambda: c.all_reduce(x, out=o))
    cases = {"raw": raw, **{v: call(c) for v, c in comms.items()}}
    for fn in cases.values():
        for _ in range(3):
            fn()
    k = max(3, int(4e-3 / max(timeit(raw, 3), 1e-7)))
    t = {name: [] for name in cases}
    for _ in range(9):
        for name, fn in cases.items():
            t[name].append(timeit(fn, k))
    if w.rank == 0:
        print(f"{op} {nb:>9} raw {statistics.median(t['raw']) * 1e6:8.1f}us " + " ".join(
            f"{name} {statistics.median(t[name]) * 1e6:8.1f}us "
            f"{statistics.median([a / b for a, b in zip(t['raw'], t[name])]):.2f}x" for name in cases if name != "raw"),
            flush=True)
