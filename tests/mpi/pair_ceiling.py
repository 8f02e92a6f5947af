"""Measure, on two ranks, where an ordinary-array all-gather or all-reduce spends
its time beside MPI's own (a measuring tool, not a test).

    flock /tmp/bench.lock mpirun -n 2 python tests/mpi/pair_ceiling.py all_gather 512 1024 4096 16384

Sizes in KiB, as bench/collectives.py counts them (an all-gather's output, an
all-reduce's buffer). Five variants take turns, call by call in rounds, on the
same arrays:

- ours: Communicator() as users get it (two ranks stage ordinary arrays up to a
  limit, and above it check headers in shared memory, then run the ring);
- plain: COLLECTIVES_STAGE=0 (the ring, its header agreement over MPI);
- ring: the ring's two-rank code alone (collectives/pair.py) on the plain
  communicator's Context: no plan, dispatch, header check or staging;
- bare: bench/bare_ring.py (Isend, Irecv, Waitall, numpy: nothing of ours);
- mpi: MPI's own collective.

Prints, per size, the median time of each and the median of the paired ratio
MPI's time / its time (> 1: faster than MPI), then the median paired
differences ours - ring (what the layers above the ring cost: plan, dispatch,
header check) and ring - bare (what our ring code costs over bare MPI calls).
"""
import os
import sys
import time

import numpy as np

from collectives import Communicator, pair, ring  # before mpi4py starts MPI (collectives/__init__.py)
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from bare_ring import BareRing  # noqa: E402

ROUNDS, ITERS = 9, 10
world = MPI.COMM_WORLD
rank = world.rank
assert world.size == 2, "two ranks"
kind = sys.argv[1]
sizes = [int(s) << 10 for s in sys.argv[2:]] or [512 << 10, 1 << 20, 4 << 20, 16 << 20]

ours = Communicator()
os.environ["COLLECTIVES_STAGE"] = "0"
plain = Communicator()
del os.environ["COLLECTIVES_STAGE"]
bare = BareRing(world.Dup())
ctx = plain._host_ctx


def ring_only_all_gather(x, out):
    ctx.renew("all_gather", 0, ctx.chunk, 60.0, None)
    k = x.size
    pair.all_gather(ctx, x, out[rank * k:(rank + 1) * k], out, [0, k, 2 * k], ring.TAG_DATA, ring.MAX_MESSAGE_BYTES)


def ring_only_all_reduce(x, out):
    ctx.renew("all_reduce", 0, ctx.chunk, 60.0, None)
    k = x.size // 2
    pair.all_reduce(ctx, x, out, [0, k, x.size], "sum", False, ring.TAG_DATA, ring.TAG_GATHER)


if kind == "all_gather":
    VARIANTS = {"ours": lambda x, o: ours.all_gather(x, out=o), "plain": lambda x, o: plain.all_gather(x, out=o),
                "ring": ring_only_all_gather, "bare": lambda x, o: bare.all_gather(x, out=o),
                "mpi": lambda x, o: world.Allgather([x, MPI.FLOAT], [o, MPI.FLOAT])}
else:
    VARIANTS = {"ours": lambda x, o: ours.all_reduce(x, out=o), "plain": lambda x, o: plain.all_reduce(x, out=o),
                "ring": ring_only_all_reduce, "bare": lambda x, o: bare.all_reduce(x, "sum", o),
                "mpi": lambda x, o: world.Allreduce([x, MPI.FLOAT], [o, MPI.FLOAT])}
names = list(VARIANTS)
if rank == 0:
    print(f"# {kind}, 2 ranks, float32; time(us) median over {ROUNDS} rounds of {ITERS} calls (max over ranks); "
          f"(x): median paired MPI time / this", flush=True)
for nbytes in sizes:
    count = nbytes // 4
    if kind == "all_gather":
        k = count // 2
        x = np.arange(k, dtype=np.float32) + rank * k
        out = np.empty(2 * k, np.float32)
        want = np.arange(2 * k, dtype=np.float32)
    else:
        count -= count % 32  # even float32 halves on 64-byte boundaries: every variant splits alike
        x = ((np.arange(count) * 7 + rank * 13) % 17 - 8).astype(np.float32)
        out = np.empty(count, np.float32)
        want = sum(((np.arange(count) * 7 + q * 13) % 17 - 8).astype(np.float32) for q in range(2))
    times = {v: [] for v in names}
    for v in names:
        out[:] = -1
        VARIANTS[v](x, out)
        assert np.array_equal(out, want), (v, nbytes)
        VARIANTS[v](x, out)
    for rd in range(ROUNDS):
        for v in names[rd % len(names):] + names[:rd % len(names)]:
            world.Barrier()
            t0 = time.perf_counter()
            for _ in range(ITERS):
                VARIANTS[v](x, out)
            times[v].append(world.allreduce((time.perf_counter() - t0) / ITERS, op=MPI.MAX))
    if rank == 0:
        t = {v: np.array(times[v]) * 1e6 for v in names}
        cells = "  ".join(f"{v} {np.median(t[v]):8.1f} ({np.median(t['mpi'] / t[v]):.2f}x)" for v in names)
        print(f"{nbytes >> 10:6d} KiB  {cells}  ours-ring {np.median(t['ours'] - t['ring']):6.1f}  "
              f"ring-bare {np.median(t['ring'] - t['bare']):6.1f}", flush=True)
for c in (ours, plain):
    c.close()
