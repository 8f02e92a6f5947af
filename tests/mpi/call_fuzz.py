"""Run under mpirun: random correct calls, checked bit for bit against MPI's own.

Each call draws a collective, dtype, op, size (across the small path, the
two-rank exchange and the chunked ring), uneven counts, in place or not,
blocking or async, and one of four communicators with different chunk,
small-path and window settings; async calls are left in flight while the
next ones are issued, then waited in order. The MPI baseline itself is also
called in place and with ``out`` given, and must give the same bits as its
plain call. Prints one JSON line per rank:
{"rank", "calls", "failures": [...]}.
"""
import json
import sys

import numpy as np
from mpi4py import MPI

from collectives import Communicator
from collectives.dtypes import to_dtype

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
seed, calls = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(seed)  # the same draws on every rank
comms = [Communicator(timeout=60, chunk_bytes=int(rng.choice([64, 1000, 4096, 1 << 20])),
                      small_bytes=int(rng.choice([0, 256, 4096, 1 << 17])), window=int(rng.integers(1, 4)))
         for _ in range(4)]
mpi = Communicator(algorithm="mpi", timeout=60)
DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64"]
failures, inflight = [], []


def counts_for(total):
    cuts = np.sort(rng.integers(0, total + 1, n - 1))
    return [int(k) for k in np.diff(np.concatenate([[0], cuts, [total]]))]


def base_check(label, how, want, call, buf):
    """The MPI baseline called another way (in place, out given) returns ``buf`` holding ``want``'s bits."""
    try:
        got = call(buf)
    except Exception as e:  # e.g. MPI_ERR_BUFFER when in place is not recognised
        failures.append(f"{label}: MPI baseline {how}: {type(e).__name__}: {e}")
        return
    if got is not buf or buf.tobytes() != np.asarray(want).tobytes():
        failures.append(f"{label}: MPI baseline {how} differs")


def settle():
    for label, work, want in inflight:
        got = work.wait()
        if np.asarray(got).tobytes() != np.asarray(want).tobytes():
            failures.append(label)
    inflight.clear()


for i in range(calls):
    c = comms[int(rng.integers(len(comms)))]
    coll = str(rng.choice(["all_reduce", "reduce_scatter", "all_gather", "broadcast"]))
    dtype = to_dtype(str(rng.choice(DTYPES)))
    op = str(rng.choice(["sum", "avg", "max", "min", "prod"]))
    size = int(rng.choice([0, 1, 2, 7, 31, 100, 1000, 4099, 30000, 65539]))
    uneven, inplace, asy = (bool(rng.integers(2)) for _ in range(3))
    local = np.random.default_rng(seed * 1000003 + i * 101 + rank)
    values = [-1, 1, 2] if op == "prod" else list(range(-8, 9))
    if op == "avg" and np.dtype(dtype).kind != "i":
        values = [v * n for v in values]  # avg divides floats by n first: exact quotients, order-free bits
    label = f"call {i}: {coll} {dtype} {op} size {size} uneven {uneven} in place {inplace} async {asy}"

    def mk(k):
        return local.choice(values, size=k).astype(dtype)

    if coll == "all_reduce":
        x = mk(size)
        want = mpi.all_reduce(x, op=op)
        base_check(label, "in place", want, lambda y: mpi.all_reduce(y, op=op, out=y), x.copy())
        base_check(label, "out given", want, lambda o: mpi.all_reduce(x, op=op, out=o), np.empty_like(x))
        y = x.copy() if inplace else x
        res = c.all_reduce(y, op=op, out=y if inplace else None, async_op=asy)
    elif coll == "reduce_scatter":
        counts = counts_for(size) if uneven else None
        x = mk(size if counts else size - size % n)
        want = mpi.reduce_scatter(x, op=op, counts=counts)
        base_check(label, "out given", want, lambda o: mpi.reduce_scatter(x, op=op, counts=counts, out=o),
                   np.empty_like(want))
        res = c.reduce_scatter(x, op=op, counts=counts, async_op=asy)
    elif coll == "all_gather":
        counts = counts_for(size) if uneven else None
        k = counts[rank] if counts else size // n
        x = mk(k)
        want = mpi.all_gather(x, counts=counts)
        out = np.zeros(sum(counts) if counts else k * n, dtype)
        lo = sum(counts[:rank]) if counts else k * rank
        out[lo:lo + k] = x
        base_check(label, "in place", want, lambda o: mpi.all_gather(o[lo:lo + k], out=o, counts=counts), out.copy())
        base_check(label, "out given", want, lambda o: mpi.all_gather(x, out=o, counts=counts), np.empty_like(want))
        if inplace:
            res = c.all_gather(out[lo:lo + k], out=out, counts=counts, async_op=asy)
        else:
            res = c.all_gather(x, counts=counts, async_op=asy)
    else:
        root = int(rng.integers(n))
        x = mk(size)
        want = mpi.broadcast(x.copy(), root=root)
        base_check(label, "in place", want, lambda y: mpi.broadcast(y, root=root, out=y), x.copy())
        base_check(label, "out given", want, lambda o: mpi.broadcast(x, root=root, out=o), np.empty_like(x))
        res = c.broadcast(x, root=root, async_op=asy)
    if asy:
        inflight.append((label, res, want))
        if rng.integers(3) == 0:  # sometimes several stay in flight
            continue
    elif np.asarray(res).tobytes() != np.asarray(want).tobytes():
        failures.append(label)
    settle()
settle()
print(json.dumps({"rank": rank, "calls": calls, "failures": failures}), flush=True)
