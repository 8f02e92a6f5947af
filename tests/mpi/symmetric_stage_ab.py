"""Ordinary numpy arrays, paired in one launch: staged through the symmetric heap
at every size (COLLECTIVES_STAGE=1), the ring over MPI point-to-point
(COLLECTIVES_STAGE=0), the default (staged up to the per-collective limits,
the ring above), and MPI's own collective (Communicator(algorithm="mpi")),
call by call in turn.

  mpirun -n 2 python tests/mpi/symmetric_stage_ab.py [sizes in KiB...]
Prints, on rank 0, per collective and size: medians in us and MPI/staged,
MPI/ring, MPI/default as the median of the per-round ratios (>1: faster
than MPI), and staged/ring's time ratio (<1: staging wins).
"""
import os
import sys
import time

from collectives import Communicator  # first: it keeps Open MPI's UCX one-sided component out

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

world = MPI.COMM_WORLD
comms = {}
for name, mode in (("staged", "1"), ("ring", "0"), ("default", None)):
    if mode is None:
        os.environ.pop("COLLECTIVES_STAGE", None)
    else:
        os.environ["COLLECTIVES_STAGE"] = mode
    comms[name] = Communicator(timeout=120)
os.environ.pop("COLLECTIVES_STAGE", None)
comms["mpi"] = Communicator(algorithm="mpi", timeout=120, verify=False)
n, rank = world.size, world.rank
assert comms["staged"].symmetric.stage and comms["ring"].symmetric is None
sizes = [int(s) for s in sys.argv[1:]] or [1, 64, 1024]
ops = os.environ.get("AB_OPS", "all_reduce,reduce_scatter,all_gather,broadcast").split(",")

for kib in sizes:
    count = kib * 256
    x, o, g = np.ones(count, np.float32), np.empty(count, np.float32), np.empty(count * n, np.float32)
    rs = np.empty(count // n, np.float32)
    reps = 200 if kib <= 64 else 60 if kib <= 1024 else 10
    calls = {"all_reduce": lambda c: c.all_reduce(x, out=o), "reduce_scatter": lambda c: c.reduce_scatter(x, out=rs),
             "all_gather": lambda c: c.all_gather(x, out=g), "broadcast": lambda c: c.broadcast(x, root=0, out=o)}
    for name in ops:
        call = calls[name]
        ts = {k: [] for k in comms}
        for _ in range(reps):
            for k, c in comms.items():
                world.Barrier()
                t = time.perf_counter()
                call(c)
                ts[k].append(time.perf_counter() - t)
        t = {k: np.array(v) for k, v in ts.items()}
        if rank == 0:
            med = {k: np.median(v) * 1e6 for k, v in t.items()}
            r = {k: np.median(t["mpi"] / t[k]) for k in ("staged", "ring", "default")}
            print(f"{name:15s} {kib:6d} KiB  staged {med['staged']:8.1f} ring {med['ring']:8.1f} default "
                  f"{med['default']:8.1f} mpi {med['mpi']:8.1f} us  mpi/staged {r['staged']:5.2f}x  mpi/ring "
                  f"{r['ring']:5.2f}x  mpi/default {r['default']:5.2f}x  staged/ring "
                  f"{np.median(t['staged'] / t['ring']):5.2f}", flush=True)
for c in comms.values():
    c.close()
