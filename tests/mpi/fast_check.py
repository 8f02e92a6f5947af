"""Run under mpirun with COLLECTIVES_STAGE=1: the direct path's C programs
(collectives/symmetric/fast.py, csrc/fastpath.c), checked exactly.

  fast_check.py grid     repeated all-reduce / reduce-scatter / all-gather / barrier
                         calls on the same arrays (heap, ordinary, mixed; in place
                         or not), new data each call, against numpy; counts the
                         calls that ran to the end in C
  fast_check.py changed  one rank alternates between two heap arrays under the
                         others' one plan: their programs stop after the header
                         check and the Python path finishes the call
  fast_check.py push     all-gathers and all-reduces whose owners write into every
                         out (heap inputs and outs), even and uneven, in place
  fast_check.py async    async calls, waited on at once and queued, their later calls as
                         C programs, exact; an absent peer times out an async program
  fast_check.py faults   after many C calls: a mismatched call raises
                         MismatchError on every rank; an absent peer raises
                         CollectiveTimeout naming it
Prints one JSON line per rank: {"rank", "cases", "failures", "nfail", "runs", ...}.
Inputs are small integers, so every reduction is exact.
"""
import json
import os
import sys
import time

from collectives import Communicator  # before mpi4py starts MPI: it keeps the UCX one-sided component out

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from collectives.errors import CollectiveTimeout, MismatchError  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inputs import data  # noqa: E402  (tests/inputs.py)

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
mode = sys.argv[1]
REPEAT = 4
failures, cases, extra = [], 0, {}


def check(label, got, want):
    global cases
    cases += 1
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or not np.array_equal(g, w):
        failures.append(f"{label}: got {g.reshape(-1)[:6]} want {w.reshape(-1)[:6]} (shapes {g.shape}, {w.shape})")


def inputs(count, dtype, op, call):
    """Every rank's input for call number ``call`` (different each call)."""
    return [np.asarray(data(count, q, np.int64, op) * (1 if op == "prod" else call + 1), dtype=dtype)
            for q in range(n)]


def reduce_all(xs, op):
    f = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = f(acc, x)
    return acc


def plan_runs(comm):
    """Calls that ran to the end in C from a cached plan's program, over every cached plan."""
    return sum(getattr(p.program, "runs", 0) for p in comm.plans.values()) + \
        getattr(getattr(comm._barrier_plan, "program", None), "runs", 0)


def runs(comm):
    """Calls that ran to the end in C: from cached plans, and from the lane so far."""
    return plan_runs(comm) + lane_runs(comm)


def streamed(comm):
    """STREAM and SREDUCE ops (copies and reductions into out with streaming stores) in the cached
    plans' programs."""
    from collectives.fast.codes import C
    from collectives.fast.program import steps
    return sum(int(op in (C.STREAM, C.SREDUCE)) for p in comm.plans.values()
               if getattr(p, "program", None) is not None for words in p.program.words for _, op, _ in steps(words))


def lane_runs(comm):
    """Calls the lane (fast/lane.py) ran in C from their first line, so far."""
    return comm.lane.stats()["runs"] if comm.lane is not None else 0


def grid():
    comm = Communicator(timeout=60)
    heap = comm.alloc((3 * 8192 * n,), np.float64)  # bytes for every case's x and out
    from collectives.fast.codes import has_c
    extra["enabled"] = bool(comm.tuning.fast) and has_c()
    total = 0
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        ops = ["sum", "prod"] + (["max", "min"] if np.dtype(dtype).kind == "i" else [])
        for count in (1, 13, 1000, 8192):
            piece = count
            for where in ("heap", "ordinary", "mixed"):
                in_heap = where == "heap" or (where == "mixed" and rank == 0)
                flat = heap.view(np.uint8)

                def arr(k, at):  # k elements at byte offset ``at`` of the heap, or ordinary
                    if in_heap:
                        return flat[at:at + k * np.dtype(dtype).itemsize].view(dtype)
                    return np.zeros(k, dtype)
                isz = np.dtype(dtype).itemsize
                x, out = arr(piece * n, 0), arr(piece * n, piece * n * isz)
                s = out[:piece]
                for op in ops:
                    for call in range(REPEAT):
                        xs = inputs(piece * n, dtype, op, call)
                        x[:] = xs[rank]
                        want = reduce_all(xs, op)
                        check(f"all_reduce {np.dtype(dtype)} {op} {count} {where} #{call}",
                              comm.all_reduce(x, op=op, out=out), want)
                        check(f"reduce_scatter {np.dtype(dtype)} {op} {count} {where} #{call}",
                              comm.reduce_scatter(x, op=op, out=s), want[rank * piece:(rank + 1) * piece])
                    for call in range(REPEAT):  # in place: x is out
                        xs = inputs(piece * n, dtype, op, call)
                        x[:] = xs[rank]
                        check(f"all_reduce in place {np.dtype(dtype)} {op} {count} {where} #{call}",
                              comm.all_reduce(x, op=op, out=x), reduce_all(xs, op))
                mine = x[:piece]
                for call in range(REPEAT):
                    xs = inputs(piece * n, dtype, "sum", call)
                    mine[:] = xs[rank][:piece]
                    check(f"all_gather {np.dtype(dtype)} {count} {where} #{call}", comm.all_gather(mine, out=out),
                          np.concatenate([v[:piece] for v in xs]))
                own = out[rank * piece:(rank + 1) * piece]  # in place: x is out's own segment
                for call in range(REPEAT):
                    xs = inputs(piece * n, dtype, "sum", call)
                    own[:] = xs[rank][:piece]
                    check(f"all_gather in place {np.dtype(dtype)} {count} {where} #{call}",
                          comm.all_gather(own, out=out), np.concatenate([v[:piece] for v in xs]))
                total += plan_runs(comm)
                extra["streamed"] = extra.get("streamed", 0) + streamed(comm)
                comm.plans.clear()  # count each plan's runs once
    total += lane_runs(comm)
    for _ in range(REPEAT):
        comm.barrier()
    extra["barrier_runs"] = plan_runs(comm)
    extra["runs"] = total
    comm.close()


def changed():
    """The last rank alternates between two heap arrays; the others keep one."""
    comm = Communicator(timeout=60)
    a, b = comm.alloc((1024,), np.float32), comm.alloc((1024,), np.float32)
    out = comm.alloc((1024,), np.float32)
    for call in range(12):
        x = b if rank == n - 1 and call % 2 else a
        xs = inputs(1024, np.float32, "sum", call)
        x[:] = xs[rank]
        check(f"changed #{call}", comm.all_reduce(x, out=out), reduce_all(xs, "sum"))
    extra["runs"] = runs(comm)
    comm.close()


def faults():
    comm = Communicator(timeout=30)
    x, out = comm.alloc((256,), np.float32), comm.alloc((256,), np.float32)
    x[:] = 1
    for _ in range(20):
        comm.all_reduce(x, out=out)
    extra["runs_before"] = runs(comm)
    op = "max" if rank == n - 1 else "sum"
    try:
        comm.all_reduce(x, op=op, out=out)
        failures.append("mismatch: no error")
    except MismatchError as e:
        extra["mismatch"] = str(e)
    comm.close()
    world.Barrier()
    comm = Communicator(timeout=1.5)
    x, out = np.ones(256, np.float32), np.empty(256, np.float32)  # staged (COLLECTIVES_STAGE=1)
    for _ in range(20):
        comm.all_reduce(x, out=out)
    extra["runs_staged"] = runs(comm)
    if rank != n - 1:
        t = time.monotonic()
        try:
            comm.all_reduce(x, out=out)
            failures.append("absent: no error")
        except CollectiveTimeout as e:
            extra["timeout"] = str(e)
        extra["seconds"] = round(time.monotonic() - t, 2)
    world.Barrier()  # the absent rank waits here until the others have timed out


def cma():
    """Ordinary all-gather pieces from the tuning table's cma_min_bytes are read in place (process_vm_readv)
    unless x is inside out (then staged): even and uneven pieces, a heap input on rank 0 too; a broadcast
    root's input from that size too, in place or not; repeated, so the C programs (CMAREAD) take the later
    calls. COLLECTIVES_CMA=0: staged instead."""
    comm = Communicator(timeout=60)
    MIN_BYTES = comm.tuning.cma_min_bytes
    extra["pids"] = comm.symmetric.direct.pids is not None
    heap = comm.alloc((4 * MIN_BYTES // 4 * n,), np.float32)
    offered = 0
    for piece in (MIN_BYTES // 8, MIN_BYTES // 4, MIN_BYTES // 4 + 13, MIN_BYTES // 2):  # float32 elements
        counts = [piece + (q if piece % 2 else 0) for q in range(n)]  # odd: uneven pieces
        lo = sum(counts[:rank])
        for where in ("ordinary", "in place", "heap on rank 0"):
            out = np.empty(sum(counts), np.float32)
            if where == "in place":
                x = out[lo:lo + counts[rank]]
            elif where == "heap on rank 0" and rank == 0:
                x = heap[:counts[0]]
            else:
                x = np.empty(counts[rank], np.float32)
            for call in range(REPEAT):
                xs = [np.arange(counts[q], dtype=np.float32) * (q + 2) + call for q in range(n)]
                x[:] = xs[rank]
                check(f"cma all_gather piece={piece} {where} #{call}",
                      comm.all_gather(x, out=out, counts=None if piece % 2 == 0 else counts), np.concatenate(xs))
                offered += comm.symmetric.direct.offered
    extra["offered"] = offered
    # broadcast: a root's private input from MIN_BYTES is read in place by every other rank
    root_offered = 0
    for count in (MIN_BYTES // 8, MIN_BYTES // 4, MIN_BYTES // 2 + 5):  # float32 elements
        for root in (0, n - 1):
            for where in ("out of place", "in place"):
                x = np.empty(count, np.float32)
                out = x if where == "in place" else np.full(count, -1, np.float32)
                for call in range(REPEAT):
                    want = np.arange(count, dtype=np.float32) * (root + 3) + call
                    x[:] = want if rank == root else -2
                    check(f"cma broadcast count={count} root={root} {where} #{call}",
                          comm.broadcast(x, root=root, out=out), want)
                    root_offered += comm.symmetric.direct.offered
    extra["root_offered"] = root_offered
    extra["runs"] = runs(comm)
    extra["streamed"] = streamed(comm)
    comm.close()


def push():
    """Every input and out in the heap, large enough to be pushed (gather.PUSH_MIN_BYTES,
    allreduce.SMALL_BYTES): the owner of each piece or segment writes it into every
    out. Even and uneven pieces, in place or not, repeated so the later calls run as
    C programs; a rank whose out is private in the same calls makes them pull."""
    comm = Communicator(timeout=60)
    PUSH_MIN_BYTES = comm.tuning.push_min_all_gather
    total = PUSH_MIN_BYTES // 4 + 13 * n  # float32 elements of out: past the limit, not divisible by n
    hx, ho = comm.alloc((total + n * n,), np.float32), comm.alloc((total + n * n,), np.float32)
    pushed = 0
    for even in (True, False):
        counts = [total // n + (0 if even else q) for q in range(n)]
        lo = sum(counts[:rank])
        for where in ("heap", "in place", "private out on the last rank"):
            out = np.empty(sum(counts), np.float32) if where.startswith("private") and rank == n - 1 else \
                ho[:sum(counts)]
            x = out[lo:lo + counts[rank]] if where == "in place" else hx[:counts[rank]]
            plans = comm.symmetric.direct.plans
            plans.clear()  # so that what is left after the case is this case's
            for call in range(REPEAT):
                xs = [np.arange(counts[q], dtype=np.float32) * (q + 2) + call for q in range(n)]
                x[:] = xs[rank]
                check(f"push all_gather even={even} {where} #{call}",
                      comm.all_gather(x, out=out, counts=None if even else counts), np.concatenate(xs))
            pushed += any(k[0] == "agpush" and v is not None for k, v in plans.items())
        k = 65536 + 13  # the all-reduce's push (from SMALL_BYTES; C programs up to fast.MAX_BYTES)
        for where in ("heap", "in place", "private out on the last rank"):
            x = hx[:k]
            out = x if where == "in place" else np.empty(k, np.float32) if where.startswith("private") and \
                rank == n - 1 else ho[:k]
            for call in range(REPEAT):
                xs = inputs(k, np.float32, "sum", call)
                x[:] = xs[rank]
                check(f"push all_reduce {where} #{call}", comm.all_reduce(x, out=out), reduce_all(xs, "sum"))
    extra["pushed"] = pushed
    extra["runs"] = runs(comm)
    comm.close()


def asynchronous():
    """Async calls on heap and ordinary arrays, each plan's later calls as its C program: waited on
    at once (run on the waiting thread) and four queued before the first wait (the progress
    thread runs them), exact every time; then an async call whose peer never comes times out
    naming it, from inside the program's wait."""
    comm = Communicator(timeout=60)
    hx, ho = comm.alloc((4096 * n,), np.float32), comm.alloc((4096 * n,), np.float32)
    for where in ("heap", "ordinary"):
        x, out = (hx, ho) if where == "heap" else (np.zeros(4096 * n, np.float32), np.zeros(4096 * n, np.float32))
        seg, mine = out[:4096], x[:4096]
        for call in range(3 * REPEAT):
            xs = inputs(4096 * n, np.float32, "sum", call)
            x[:] = xs[rank]
            want = reduce_all(xs, "sum")
            check(f"async all_reduce {where} #{call}", comm.all_reduce(x, out=out, async_op=True).wait(), want)
            check(f"async reduce_scatter {where} #{call}", comm.reduce_scatter(x, out=seg, async_op=True).wait(),
                  want[rank * 4096:(rank + 1) * 4096])
            got = comm.all_gather(mine, out=out, async_op=True).wait()
            check(f"async all_gather {where} #{call}", got, np.concatenate([v[:4096] for v in xs]))
        ys = [np.zeros(256, np.float32) for _ in range(4)]
        for call in range(3 * REPEAT):
            for i, y in enumerate(ys):
                y[:] = rank + i + call
            works = [comm.all_reduce(y, out=y, async_op=True) for y in ys]  # queued: the thread runs them
            for i, (w, y) in enumerate(zip(works, ys)):
                w.wait()
                check(f"queued async all_reduce {where} #{call}.{i}", y,
                      np.full(256, sum(q + i + call for q in range(n)), np.float32))
    extra["runs"] = plan_runs(comm)
    comm.close()
    world.Barrier()
    comm = Communicator(timeout=1.5)
    x = comm.alloc((256,), np.float32)
    for _ in range(20):
        comm.all_reduce(x, out=x, async_op=True).wait()
    extra["runs_before"] = plan_runs(comm)
    if rank != n - 1:
        t = time.monotonic()
        try:
            comm.all_reduce(x, out=x, async_op=True).wait()
            failures.append("absent: no error")
        except CollectiveTimeout as e:
            extra["timeout"] = str(e)
        extra["seconds"] = round(time.monotonic() - t, 2)
    world.Barrier()  # the absent rank waits here until the others have timed out


{"grid": grid, "changed": changed, "faults": faults, "cma": cma, "push": push, "async": asynchronous}[mode]()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures[:10], "nfail": len(failures), **extra}),
      flush=True)
