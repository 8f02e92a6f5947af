"""Run under mpirun: every collective over a grid of cases, checked exactly.

Each case is checked against numpy (the expected answer computed from every
rank's input, which each rank can rebuild) and against MPI's own collective
on the same input (algorithm="mpi"), bit for bit. Inputs are small integers,
so float sums are exact in any order. Prints one JSON line per rank:
{"rank", "cases", "failures": [...]}.
"""
import json
import os
import sys

import numpy as np
from mpi4py import MPI

from collectives import Communicator
from collectives.dtypes import KERNEL_DTYPES, to_dtype

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inputs import data  # noqa: E402  (tests/inputs.py)

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
quick = "--quick" in sys.argv

COUNTS = [0, 1, 2, 3, 5, 7, 13, 31, 64, 97, 1000, 4099] if not quick else [0, 1, 7, 100]
BIG = [65536 + 3, 300007]  # several chunks, segments not divisible by n
OPS = ["sum", "avg", "max", "min", "prod"]


def expected(count, dtype, op):
    xs = [data(count, r, np.float64 if op != "prod" else np.int64, op) for r in range(n)]
    if op in ("sum", "avg"):
        e = np.sum(xs, axis=0)
        if op == "avg":  # float inputs are n * data (see avg_input): avg is exactly the sum of data
            e = np.trunc(e / n) if np.dtype(dtype).kind == "i" else e
    elif op == "prod":
        e = np.prod(xs, axis=0)
    elif op == "max":
        e = np.max(xs, axis=0)
    else:
        e = np.min(xs, axis=0)
    return np.asarray(e, dtype=np.float64).astype(dtype)


def avg_input(count, r, dt, op):
    """data(), times n for a floating avg: avg divides floats by n before the sum
    (as NCCL does); these quotients are exact, so every order gives the same bits."""
    x = data(count, r, dt, op)
    return (x.astype(np.float64) * n).astype(dt) if op == "avg" and np.dtype(dt).kind != "i" else x


failures, cases = [], 0
ring = Communicator(chunk_bytes=64, small_bytes=256, timeout=60)  # tiny chunks: many-chunk paths
ring_default = Communicator(timeout=60)
mpi = Communicator(algorithm="mpi", timeout=60)


def check(label, got, want, base=None):
    global cases
    cases += 1
    got_f = np.asarray(got).astype(np.float64)
    ok = got_f.shape == np.asarray(want).astype(np.float64).shape and np.array_equal(
        got_f, np.asarray(want).astype(np.float64))
    if ok and base is not None:
        ok = np.asarray(got).tobytes() == np.asarray(base).tobytes()
        if not ok:
            label += " (differs from MPI's own result)"
    if not ok:
        failures.append(f"{label}: got {np.asarray(got)[:8]} want {np.asarray(want)[:8]}")


def uneven(count):
    """Uneven counts with a zero: rank 0 gets nothing when n > 1."""
    if n == 1:
        return [count]
    rest = [count // (n - 1)] * (n - 1)
    rest[-1] += count - sum(rest)
    return [0] + rest


for dname in KERNEL_DTYPES:
    dt = to_dtype(dname)
    for op in OPS:
        counts = COUNTS + (BIG if dname == "float32" and op in ("sum", "avg") else [])
        for count in counts:
            x = avg_input(count, rank, dt, op)
            want = expected(count, dt, op)
            tag = f"{dname} {op} count={count}"
            base = mpi.all_reduce(x, op=op)
            for comm, cname in ((ring, "ring/tiny-chunks"), (ring_default, "ring")):
                got = comm.all_reduce(x, op=op)
                check(f"all_reduce {cname} {tag}", got, want, base)
                y = x.copy()
                r = comm.all_reduce(y, op=op, out=y)
                check(f"all_reduce in-place {cname} {tag}", y, want, base)
                if r is not y:
                    failures.append(f"all_reduce in-place {tag}: did not return out")
                if not np.array_equal(x, avg_input(count, rank, dt, op)):
                    failures.append(f"all_reduce {tag}: input modified")
            # reduce_scatter: equal split when divisible, uneven counts always
            for rc in ([None] if count % n == 0 else []) + [uneven(count)]:
                cts = rc or [count // n] * n
                lo = sum(cts[:rank])
                seg = want[lo:lo + cts[rank]]
                base = mpi.reduce_scatter(x, op=op, counts=rc)
                for comm, cname in ((ring, "ring/tiny-chunks"), (ring_default, "ring")):
                    got = comm.reduce_scatter(x, op=op, counts=rc)
                    check(f"reduce_scatter {cname} {tag} counts={cts}", got, seg, base)
                if not np.array_equal(x, avg_input(count, rank, dt, op)):
                    failures.append(f"reduce_scatter {tag}: input modified")
        if op != "sum":
            continue
        for count in COUNTS[:8]:
            # all_gather: equal pieces and uneven pieces (rank r has r+count elements)
            for cts in ([count] * n, [count + q for q in range(n)], uneven(count * n)):
                piece = data(cts[rank], rank, dt, "sum")
                want = np.concatenate([data(cts[q], q, dt, "sum") for q in range(n)])
                base = mpi.all_gather(piece, counts=cts)
                for comm, cname in ((ring, "ring/tiny-chunks"), (ring_default, "ring")):
                    got = comm.all_gather(piece, counts=None if len(set(cts)) == 1 else cts)
                    check(f"all_gather {cname} {dname} counts={cts}", got, want, base)
            for root in sorted({0, n - 1, n // 2}):
                x = data(count, rank, dt, "sum")
                want = data(count, root, dt, "sum")
                base = mpi.broadcast(x, root=root)
                for comm, cname in ((ring, "ring/tiny-chunks"), (ring_default, "ring")):
                    got = comm.broadcast(x, root=root)
                    check(f"broadcast {cname} {dname} count={count} root={root}", got, want, base)
                    y = x.copy()
                    comm.broadcast(y, root=root, out=y)
                    check(f"broadcast in-place {cname} {dname} count={count} root={root}", y, want)

# async: several in flight, results in call order, overlap with compute
xs = [data(100003, rank, np.float32, "sum") for _ in range(3)]
works = [ring_default.all_reduce(x, async_op=True) for x in xs]
works.append(ring.reduce_scatter(xs[0], counts=uneven(100003), async_op=True))
_ = np.sort(np.random.default_rng(rank).random(200000))  # compute while they run
for w in works[:3]:
    check("async all_reduce", w.wait(), expected(100003, np.float32, "sum"))
lo = sum(uneven(100003)[:rank])
check("async reduce_scatter", works[3].wait(), expected(100003, np.float32, "sum")[lo:lo + uneven(100003)[rank]])
ring_default.barrier()
for c in (ring, ring_default, mpi):
    c.close()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures[:20], "nfail": len(failures)}), flush=True)
