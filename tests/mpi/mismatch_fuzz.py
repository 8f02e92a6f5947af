"""Run under mpirun: random mismatched calls, each on a fresh communicator.

Every case has one rank (the victim) differ from the others in one field
that the header check must catch: the count, the op, the dtype, the
collective, the broadcast root, or a barrier called first. Sizes cross the
small path, the two-rank exchange and the chunked ring. Every rank must raise
MismatchError, and nothing may be written past any output. Prints one JSON
line per rank: {"rank", "cases", "failures": [...]}.
"""
import json
import sys

import numpy as np
from mpi4py import MPI

from collectives import Communicator, MismatchError

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
seed, cases = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(seed)  # the same draws on every rank
GUARD = 1024
failures = []
for case in range(cases):
    comm = Communicator(timeout=20, chunk_bytes=int(rng.choice([256, 4096, 1 << 20])),
                        small_bytes=int(rng.choice([0, 4096, 1 << 17])))
    coll = str(rng.choice(["all_reduce", "reduce_scatter", "all_gather", "broadcast"]))
    what = str(rng.choice(["count", "op", "dtype", "collective", "root", "order"]))
    if what == "op" and coll in ("all_gather", "broadcast"):
        what = "count"
    if what == "root" and coll != "broadcast":
        what = "dtype"
    count = n * int(rng.choice([1, 250, 3000, 70000]))
    victim = int(rng.integers(n))
    me = rank == victim
    op, dtype, root = "sum", np.float32, 0
    if me:
        count += n if what == "count" else 0
        op = "max" if what == "op" else op
        dtype = np.float64 if what == "dtype" else dtype
        root = 1 % n if what == "root" else root
        if what == "collective":
            coll = {"all_reduce": "reduce_scatter", "reduce_scatter": "all_gather",
                    "all_gather": "broadcast", "broadcast": "all_reduce"}[coll]
    x = np.ones(count, dtype)
    piece = count // n
    size = {"all_reduce": count, "reduce_scatter": piece, "all_gather": count, "broadcast": count}[coll]
    buf = np.zeros(size + GUARD, dtype)
    out = buf[:size]
    label = f"case {case}: {coll}, {what} differs on rank {victim}, count {count}"
    try:
        if me and what == "order":
            comm.barrier()
        if coll == "all_reduce":
            comm.all_reduce(x, op=op, out=out)
        elif coll == "reduce_scatter":
            comm.reduce_scatter(x, op=op, out=out)
        elif coll == "all_gather":
            comm.all_gather(x[:piece], out=out)
        else:
            comm.broadcast(x, root=root, out=out)
        failures.append(f"{label}: no error on rank {rank}")
    except MismatchError as e:
        if f"rank {rank}:" not in str(e):
            failures.append(f"{label}: the error does not name rank {rank}: {e}")
    except Exception as e:  # noqa: BLE001  (anything else is a failure to report)
        failures.append(f"{label}: {type(e).__name__} on rank {rank}: {e}")
    if np.count_nonzero(buf[size:]):
        failures.append(f"{label}: {np.count_nonzero(buf[size:])} elements written past the output on rank {rank}")
    comm.close()
    world.Barrier()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures}), flush=True)
