"""Run under mpirun: large staged all-reduces and all-gathers through the pipe
(collectives/symmetric/pipe.py, csrc/pipe.c), checked exactly.

  pipe_check.py grid      COLLECTIVES_STAGE=1, COLLECTIVES_PIPE_MIN=1 and small
                          chunks (set by the caller): every dtype and op the pipe
                          takes, sizes 0, 1, primes and many chunks, in place and
                          not, uneven and empty all-gather pieces, one rank's input
                          in the heap, interleaved with calls that take other roads
                          (so the step counters and slots carry across calls),
                          queued calls on the progress thread, the trace's bytes
  pipe_check.py default   automatic staging (nothing set): which sizes take the
                          pipe on two ranks, exact results at 16, 32 and 64 MiB
  pipe_check.py mismatch  a mismatched pipe-sized call raises MismatchError on
                          every rank before any chunk moves
Prints one JSON line per rank: {"rank", "cases", "failures", "nfail", "piped", ...}.
Inputs are small integers, so every reduction is exact.
"""
import json
import os
import sys

from collectives import Communicator  # before mpi4py starts MPI: it keeps the UCX one-sided component out

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from collectives.errors import MismatchError  # noqa: E402
from collectives.dtypes import bfloat16 as BF16  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inputs import data  # noqa: E402  (tests/inputs.py)

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
mode = sys.argv[1]
failures, cases, extra = [], 0, {}
comm = Communicator(timeout=60)
sig = comm.symmetric.direct.sig if comm.symmetric is not None else None


def steps() -> int:
    return sig.pipe_seq if sig is not None else -1


def check(label, got, want, piped=None, before=None):
    """Exact equality; with ``piped``, also whether the call went through the pipe."""
    global cases
    cases += 1
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or not np.array_equal(g, w):
        failures.append(f"{label}: got {g.reshape(-1)[:6]} want {w.reshape(-1)[:6]} (shapes {g.shape}, {w.shape})")
    if piped is not None and (steps() > before) != piped:
        failures.append(f"{label}: {'not ' if piped else ''}through the pipe (steps {before} -> {steps()})")


def want_reduce(xs, op, dt):
    acc = xs[0].astype(np.int64)
    for v in xs[1:]:
        acc = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op](acc, v)
    if op == "avg":
        acc = acc / n if np.dtype(dt).kind == "f" else np.trunc(acc / n)
    return acc.astype(dt)


def all_reduce_case(count, dt, op, inplace, heap_rank=None, piped=True):
    xs = [data(count, q, dt, "prod" if op == "prod" else "sum") for q in range(n)]
    if heap_rank is not None:  # one rank's input in the heap, the others' private: staged, still piped
        h = comm.alloc((count,), dt)  # (a call every rank makes)
        h[:] = xs[rank]
        x = h if heap_rank == rank else xs[rank].copy()
    else:
        x = xs[rank].copy()
    before = steps()
    got = comm.all_reduce(x, op=op, out=x if inplace else None)
    check(f"all_reduce {np.dtype(dt).name} {op} n={count} inplace={inplace} heap={heap_rank}", got,
          want_reduce(xs, op, dt), piped and count > 0, before)  # (nothing to move: no steps)


def all_gather_case(counts, dt, inplace):
    pieces = [data(c, q, dt) for q, c in enumerate(counts)]
    want = np.concatenate(pieces) if pieces else np.empty(0, dt)
    before = steps()
    if inplace:
        out = np.zeros(sum(counts), dt)
        o = sum(counts[:rank])
        out[o:o + counts[rank]] = pieces[rank]
        got = comm.all_gather(out[o:o + counts[rank]], out=out, counts=counts)
    else:
        got = comm.all_gather(pieces[rank].copy(), counts=counts)
    check(f"all_gather {np.dtype(dt).name} counts={counts} inplace={inplace}", got, want, sum(counts) > 0, before)


def grid():
    chunk = int(os.environ["COLLECTIVES_PIPE_CHUNK"])
    sizes = [0, 1, 7, 101, chunk // 4 + 3, 5 * chunk + 17, 40009]
    for count in sizes:
        for dt in (np.float32, np.float64, np.int32, np.int64):
            ops = ("sum", "avg", "prod") + (("max", "min") if np.dtype(dt).kind == "i" else ())
            for op in ops:
                for inplace in (False, True):
                    all_reduce_case(count, dt, op, inplace)
            # float max/min: not in the C loop (numpy's signed zeros and NaNs): the ring, exact all the same
            if np.dtype(dt).kind == "f":
                all_reduce_case(count, dt, "max", False, piped=False)
        for dt in (np.float32, np.int64, np.float16, BF16):  # all-gathers move bytes: any dtype
            all_gather_case([count] * n, dt, False)
            all_gather_case([count + q * 3 for q in range(n)], dt, True)
        all_gather_case([0 if q % 2 else count + 5 for q in range(n)], np.float32, False)  # empty pieces
        all_reduce_case(count, np.float32, "sum", False, heap_rank=0)
        # heap inputs on every rank: the direct path, not the pipe (nothing staged)
        x = comm.alloc((count,), np.int64)
        x[:] = data(count, rank, np.int64)
        before = steps()
        got = comm.all_reduce(x)
        check(f"heap all_reduce n={count}", got, want_reduce([data(count, q, np.int64) for q in range(n)], "sum",
                                                              np.int64), False, before)
    # the same arrays again and again (what a training loop does): counters carry over
    x = data(3 * chunk + 5, rank, np.float64)
    for i in range(20):
        before = steps()
        got = comm.all_reduce(x * (i + 1))
        check(f"repeat {i}", got, want_reduce([data(x.size, q, np.float64) * (i + 1) for q in range(n)], "sum",
                                              np.float64), True, before)
    # queued (async_op): the pipe on the progress thread, several calls in flight, in call order
    xs = [data(2 * chunk + 9, rank, np.int64) * (i + 1) for i in range(4)]
    before = steps()
    works = [comm.all_reduce(x, async_op=True) for x in xs] + [comm.all_gather(xs[0], async_op=True)]
    got = [w.wait() for w in works]
    for i in range(4):
        check(f"async all_reduce {i}", got[i], want_reduce([data(xs[0].size, q, np.int64) * (i + 1) for q in range(n)],
                                                          "sum", np.int64))
    check("async all_gather", got[4], np.concatenate([data(xs[0].size, q, np.int64) for q in range(n)]))
    if steps() <= before:
        failures.append("async calls did not go through the pipe")
    extra["piped_steps"] = steps()
    traced()


def traced():
    """With a tracer: what each rank took from its peers, from the pipe's own trace
    events, equals the direct path's byte formulas (volumes.direct_volumes)."""
    from collectives.symmetric.allreduce import segments
    from collectives.teach.trace import Tracer
    from collectives.volumes import direct_volumes
    comm.tracer = t = Tracer()
    count = 30011
    comm.all_reduce(data(count, rank, np.float32))
    segs = segments(count, n, np.dtype(np.float32))
    comm.all_gather(data(count + rank, rank, np.float32), counts=[count + q for q in range(n)])
    comm.tracer = None
    got = {"all_reduce": 0, "all_gather": 0}
    for e in t.data_events():
        if e["action"] == "recv" and str(e.get("phase", "")).startswith("pipelined"):
            got["all_gather" if "all_gather" in e["label"] else "all_reduce"] += e["nbytes"]
    want = {"all_reduce": direct_volumes("all_reduce", segs, 4)[rank].received,
            "all_gather": direct_volumes("all_gather", [count + q for q in range(n)], 4)[rank].received}
    if got != want:
        failures.append(f"traced bytes {got}, formulas {want}")
    extra["traced"] = got


def default():
    """Two ranks, staging automatic: the pipe from its measured sizes only."""
    PIPE_MIN_BYTES = comm.tuning.pipe_min()
    roads = extra["roads"] = {}
    for nbytes in (16 << 20, 32 << 20, 64 << 20):
        count = nbytes // 4
        x = data(count, rank, np.float32)
        before = steps()
        got = comm.all_reduce(x)
        want = want_reduce([data(count, q, np.float32) for q in range(n)], "sum", np.float32)
        check(f"default all_reduce {nbytes}", got, want, 0 < PIPE_MIN_BYTES["all_reduce"] <= nbytes, before)
        roads[f"all_reduce {nbytes}"] = comm.road_taken().value
        piece = data(count // n, rank, np.float32)
        before = steps()
        got = comm.all_gather(piece)
        want = np.concatenate([data(count // n, q, np.float32) for q in range(n)])
        check(f"default all_gather {nbytes}", got, want, 0 < PIPE_MIN_BYTES["all_gather"] <= nbytes, before)
        roads[f"all_gather {nbytes}"] = comm.road_taken().value
    extra["pipe_min"] = PIPE_MIN_BYTES
    extra["cma"] = comm.symmetric.direct.pids is not None  # private arrays read in place (cma.py)


def mismatch():
    """A few piped calls, then one rank passes a longer array: MismatchError on
    every rank from the headers, before any chunk moves (the step counters stay)."""
    for _ in range(3):
        all_reduce_case(50000, np.int32, "sum", False)
    before = steps()
    count = 50000 + (7 if rank == n - 1 else 0)
    try:
        comm.all_reduce(data(count, rank, np.int32))
        failures.append("mismatch: no error")
    except MismatchError as e:
        extra["message"] = str(e)
    if steps() != before:
        failures.append(f"mismatch: the pipe moved ({before} -> {steps()})")


{"grid": grid, "default": default, "mismatch": mismatch}[mode]()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures[:20], "nfail": len(failures), **extra}),
      flush=True)
comm.close()
