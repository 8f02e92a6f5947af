"""Run under mpirun -n N (2 or 3): the all-reduce read in place (symmetric/allreduce.py's
read_in_place, fast/calls.py's program of it) exact against numpy.

Private arrays past the stage limit, in and out of place, every op, several dtypes
(and out of place from cma_min_all_reduce, below the stage limit, where in place is staged),
sizes that split into several chunks and a remainder (cma_chunk_bytes set small
here), segments that are not whole chunks; the same arrays again (the C
program), a fresh view and a new array on every call (the lane's relocated
programs); the road taken and the road ``Communicator.road`` names; a call where
one rank reduces in place and another does not (read in place too), and one where
one rank's x is in the heap (agreed from the posts: the staged-ring); and the tuning's
cma_max_all_reduce at 0 (the staged-ring again). Three ranks take the direct roads
only where the tuning says their node size was measured (stage_ranks, set here).
Prints one JSON line per rank: {"rank", "cases", "c_runs", "failures"}.
"""
import json
import os
import tempfile

os.environ["COLLECTIVES_CMA_CHUNK"] = str(64 << 10)
from mpi4py import MPI  # noqa: E402

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
tune = os.path.join(tempfile.gettempdir(), f"rz-cma-ar-{os.getpid()}.json")
with open(tune, "w") as f:
    json.dump({"stage_ranks": n}, f)
os.environ["RINGZERO_TUNING"] = tune

import numpy as np  # noqa: E402

from collectives import Communicator  # noqa: E402
from collectives.roads import Road  # noqa: E402

comm = Communicator(timeout=60)
os.unlink(tune)
failures, cases = [], 0
FNS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def inputs(count, dt, op, q, seed=0):
    """Small integers (exact in every dtype, in any order of the sum); prod: ones and twos."""
    rng = np.random.default_rng(1000 * seed + q)
    if op == "prod":
        return rng.integers(1, 3, count).astype(dt)
    return rng.integers(-50, 50, count).astype(dt)


def expected(count, dt, op, seed=0):
    xs = [inputs(count, dt, op, q, seed).astype(np.float64) for q in range(n)]
    acc = xs[0]
    for x in xs[1:]:
        acc = FNS["sum" if op == "avg" else op](acc, x)
    if op == "avg":
        acc = acc / n if np.dtype(dt).kind == "f" else np.trunc(acc / n)
    return acc.astype(dt)


def check(label, got, want, road=Road.DIRECT):
    global cases
    cases += 1
    if not np.array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8)):
        bad = np.flatnonzero(np.asarray(got).astype(np.float64) != want.astype(np.float64))
        failures.append(f"{label}: {bad.size} wrong, first at {bad[:3].tolist()}")
    if comm.road_taken() is not road:
        failures.append(f"{label}: took {comm.road_taken()}, expected {road}")


d = comm.symmetric.direct if comm.symmetric is not None else None
if d is None or d.pids is None:
    failures.append("no direct roads or no process_vm_readv here: nothing read in place")
else:
    least = comm.tuning.stage_max_all_reduce
    grid = [(np.float32, least + 4, ("sum", "max", "min", "prod", "avg")),
            (np.float64, least + (320 << 10) + 8, ("sum", "avg")),
            (np.int32, least + 12, ("sum", "max", "avg")), (np.int64, 3 * least + 40, ("sum",)),
            (np.float16, least + 6, ("sum",))]
    for dt, nbytes, ops in grid:
        dt = np.dtype(dt)
        count = nbytes // dt.itemsize
        for op in ops:
            label = f"{dt} {nbytes} B {op}"
            x, out = np.empty(count, dt), np.empty(count, dt)
            for o in (x, out):  # in place, then out of place
                said = comm.road("all_reduce", x, out=o, op=op).road
                if said is not Road.DIRECT:
                    failures.append(f"{label}: road() said {said}")
            for call in range(3):  # the same arrays: the Python path, then the program
                x[:] = inputs(count, dt, op, rank, call)
                check(f"{label} #{call}", comm.all_reduce(x, out=x, op=op), expected(count, dt, op, call))
                x[:] = inputs(count, dt, op, rank, call)
                check(f"{label} out #{call}", comm.all_reduce(x, out=out, op=op), expected(count, dt, op, call))
                check(f"{label} out #{call} x", x, inputs(count, dt, op, rank, call))
            for call in range(3):  # a fresh view of x, then new arrays, every call
                x[:] = inputs(count, dt, op, rank, call)
                v = x[:]
                check(f"{label} view #{call}", comm.all_reduce(v, out=v, op=op), expected(count, dt, op, call))
                y = inputs(count, dt, op, rank, call + 3)
                check(f"{label} new #{call}", comm.all_reduce(y, out=y, op=op), expected(count, dt, op, call + 3))
                y = inputs(count, dt, op, rank, call + 3)
                o = np.empty_like(y)
                check(f"{label} new out #{call}", comm.all_reduce(y, out=o, op=op), expected(count, dt, op, call + 3))
    count = (least + 4) // 4
    want = expected(count, np.float32, "sum")
    x = inputs(count, np.float32, "sum", rank)  # rank 0 in place, the others out of place
    out = x if rank == 0 else np.empty_like(x)
    check("mixed in place", comm.all_reduce(x, out=out), want)
    # out of place from cma_min_all_reduce, below the stage limit: read in place; in place there: staged
    small = (comm.tuning.cma_min_all_reduce + 4096) // 4
    if small * 4 <= least:
        want_small = expected(small, np.float32, "sum")
        for call in range(3):
            x = inputs(small, np.float32, "sum", rank)
            check(f"{small * 4} B out #{call}", comm.all_reduce(x, out=np.empty_like(x)), want_small)
            check(f"{small * 4} B in place #{call}", comm.all_reduce(x, out=x), want_small,
                  Road.ONE_PHASE if n == 2 else Road.DIRECT)  # (staged: more than two ranks take two phases)
            x = inputs(small, np.float32, "sum", rank)  # rank 0 in place (staged), the others read in place
            check(f"{small * 4} B mixed #{call}", comm.all_reduce(x, out=x if rank == 0 else np.empty_like(x)),
                  want_small, Road.STAGED_RING)
    h = comm.alloc((count,), np.float32)  # (collective: every rank allocates)
    h = h if rank == 0 else np.empty(count, np.float32)
    h[:] = inputs(count, np.float32, "sum", rank)  # rank 0's x in the heap, the others' private
    check("mixed heap", comm.all_reduce(h, out=h), want, Road.STAGED_RING)
    runs = comm.lane.stats()["runs"] if comm.lane is not None else 0
    comm.tuning.cma_max_all_reduce = 0  # off: the staged-ring
    x = inputs(count, np.float32, "sum", rank)
    check("cma_max_all_reduce 0", comm.all_reduce(x, out=x), want, Road.STAGED_RING)
comm.close()
print(json.dumps({"rank": rank, "cases": cases, "c_runs": runs if d is not None else 0, "failures": failures}))
