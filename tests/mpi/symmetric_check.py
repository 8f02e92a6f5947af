"""Run under mpirun: the direct (symmetric heap) collectives, checked exactly.

  symmetric_check.py grid      every dtype x op x count (uneven, in place,
                               heap or private out) against numpy
  symmetric_check.py mismatch  mismatched calls raise MismatchError on every rank
  symmetric_check.py absent    the last rank never calls: the others raise
                               CollectiveTimeout naming it
  symmetric_check.py staged    COLLECTIVES_STAGE=1: ordinary arrays staged
  symmetric_check.py defaults  staging by default: each collective's size limit
                               from both sides (traced), COLLECTIVES_STAGE=0/1,
                               construction cost and memory
Prints one JSON line per rank: {"rank", "cases", "failures", "nfail", ...}.
Inputs are small integers, so every reduction is exact in any order.
"""
import json
import os
import sys
import time

from collectives import Communicator  # before mpi4py starts MPI: it keeps the UCX one-sided component out

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from collectives.dtypes import KERNEL_DTYPES, to_dtype
from collectives.errors import CollectiveTimeout, MismatchError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inputs import data  # noqa: E402  (tests/inputs.py)

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
mode = sys.argv[1] if len(sys.argv) > 1 else "grid"
COUNTS = [0, 1, 3, 13, 97, 1000, 4099, 12007]  # 12007 float32/64: past the one-phase all-reduce
BIG = [65536 * 3 + 5]  # chunked reductions, segments not divisible by n
if "--quick" in sys.argv:  # 4-5 ranks on 2 cores: fewer sizes, the same paths
    COUNTS, BIG = [0, 1, 13, 97, 12007], [65536 + 5]
OPS = ["sum", "avg", "max", "min", "prod"]
failures, cases, extra = [], 0, {}


def expected(count, dtype, op):
    xs = [data(count, r, np.float64 if op != "prod" else np.int64, op) for r in range(n)]
    e = {"sum": np.sum, "avg": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op](xs, axis=0)
    if op == "avg":
        e = np.trunc(e / n) if np.dtype(dtype).kind == "i" else e / n
    return np.asarray(e, dtype=np.float64).astype(dtype)


def check(label, got, want):
    global cases
    cases += 1
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or not np.array_equal(g.astype(np.float64), w.astype(np.float64)):
        bad = np.flatnonzero(g.astype(np.float64) != w.astype(np.float64)) if g.shape == w.shape else [0]
        i = int(bad[0]) if len(bad) else 0
        failures.append(f"{label}: {len(bad)} elements differ, first at {i}: got {g.reshape(-1)[i:i + 4]} "
                        f"want {w.reshape(-1)[i:i + 4]} (shapes {g.shape}, {w.shape})")


def uneven(count):
    if n == 1:
        return [count]
    rest = [count // (n - 1)] * (n - 1)
    rest[-1] += count - sum(rest)
    return [0] + rest


def grid():
    comm = Communicator(timeout=60)
    comm.alloc((1,), np.float32)
    sym = comm.symmetric
    hier = sym.hier
    extra["path"] = "ring" if not sym.enabled else "direct" if hier is None else f"hier {hier.nodes}x{hier.k}"
    for dname in KERNEL_DTYPES:
        dt = to_dtype(dname)
        top = max(COUNTS + BIG) * n
        hx, ho, hg = comm.alloc((top,), dt), comm.alloc((top,), dt), comm.alloc((2, top // 2), dt)
        for op in OPS:
            for count in COUNTS + (BIG if dname in ("float32", "bfloat16") and op in ("sum", "avg") else []):
                tag = f"{dname} {op} count={count}"
                mine, want = data(count, rank, dt, op), expected(count, dt, op)
                x = hx[:count]
                x[:] = mine
                check(f"all_reduce private out {tag}", comm.all_reduce(x, op=op), want)
                check(f"all_reduce input kept {tag}", x, mine)
                o = ho[:count]
                check(f"all_reduce heap out {tag}", comm.all_reduce(x, op=op, out=o), want)
                comm.all_reduce(x, op=op, out=x)
                check(f"all_reduce in place {tag}", x, want)
                x[:] = mine
                for cts in ([None] if count % n == 0 else []) + [uneven(count)]:
                    c = cts or [count // n] * n
                    lo = sum(c[:rank])
                    got = comm.reduce_scatter(x, op=op, counts=cts)
                    check(f"reduce_scatter {tag} counts={c}", got, want[lo:lo + c[rank]])
                    got = comm.reduce_scatter(x, op=op, counts=cts, out=ho[:c[rank]])
                    check(f"reduce_scatter heap out {tag} counts={c}", got, want[lo:lo + c[rank]])
                check(f"reduce_scatter input kept {tag}", x, mine)
            if op != "sum":
                continue
            for count in COUNTS[-1:] + BIG:  # ranks on different roads in one call: push, then pull
                mine, want = data(count, rank, dt, op), expected(count, dt, op)
                x = hx[:count]
                x[:] = mine
                got = comm.all_reduce(x, out=x if rank == 0 else ho[:count])  # push: rank 0 in place
                check(f"all_reduce rank 0 in place, others heap out {dname} count={count}", got, want)
                x[:] = mine
                got = comm.all_reduce(x, out=None if rank == n - 1 else ho[:count])  # pull: one private out
                check(f"all_reduce rank {n - 1} private out, others heap out {dname} count={count}", got, want)
                check(f"all_reduce input kept (mixed roads) {dname} count={count}", x, mine)
            if dname == "float32" and n > 1:  # outs past gather.PUSH_MIN_BYTES: each owner writes its piece
                c = top // n - n
                for cts in ([c] * n, [c - q for q in range(n)]):
                    for in_place in (False, True):
                        lo, o = sum(cts[:rank]), ho[:sum(cts)]
                        x = o[lo:lo + cts[rank]] if in_place else hx[:cts[rank]]
                        x[:] = data(cts[rank], rank, dt)
                        want = np.concatenate([data(cts[q], q, dt) for q in range(n)])
                        check(f"all_gather pushed in_place={in_place} counts={cts}", comm.all_gather(
                            x, counts=cts, out=o), want)
            for count in COUNTS[:6]:
                for cts in ([count] * n, [count + q for q in range(n)], uneven(count * n)):
                    x = hx[:cts[rank]]
                    x[:] = data(cts[rank], rank, dt)
                    want = np.concatenate([data(cts[q], q, dt) for q in range(n)])
                    got = comm.all_gather(x, counts=None if len(set(cts)) == 1 else cts)
                    check(f"all_gather {dname} counts={cts}", got, want)
                    got = comm.all_gather(x, counts=cts, out=ho[:sum(cts)])
                    check(f"all_gather heap out {dname} counts={cts}", got, want)
                for root in sorted({0, n - 1, n // 2}):
                    x = hx[:count]
                    x[:] = data(count, rank, dt)
                    check(f"broadcast {dname} count={count} root={root}", comm.broadcast(x, root=root),
                          data(count, root, dt))
                    comm.broadcast(x, root=root, out=x)
                    check(f"broadcast in place {dname} count={count} root={root}", x, data(count, root, dt))
        # a 2-D heap array: shapes kept, flat order used
        g = hg[:, :6]  # not contiguous: takes the ring path, still right
        g[:] = rank
        check(f"all_reduce 2-D strided view {dname}", comm.all_reduce(np.ascontiguousarray(g)),
              np.full((2, 6), sum(range(n)), dt))
        h2 = hg.reshape(-1)[:12].reshape(3, 4)
        h2[:] = rank + 1
        check(f"all_reduce 2-D heap {dname}", comm.all_reduce(h2), np.full((3, 4), n * (n + 1) // 2, dt))
    trace(comm)
    comm.barrier()
    works = [comm.all_reduce(hx[:1000], async_op=True), comm.barrier(async_op=True)]
    for w in works:
        w.wait()
    comm.close()


def trace(comm):
    """Direct reads show in the trace as receives; byte totals against their formulas."""
    from collectives.teach.trace import Tracer
    t = comm.tracer = Tracer()
    count, it = 4096 * n, 4  # float32, past the one-phase all-reduce; segments of 4096
    x = comm.alloc((count,), np.float32)
    x[:] = 1
    labels = []
    for name, fn in (("all_reduce", lambda: comm.all_reduce(x)), ("reduce_scatter", lambda: comm.reduce_scatter(x)),
                     ("all_gather", lambda: comm.all_gather(x[:4096])), ("broadcast", lambda: comm.broadcast(x))):
        fn()
        labels.append((name, t.labels()[-1]))
    comm.tracer = None
    seg = 4096 * it
    sym = comm.symmetric
    k = sym.heap.size  # ranks in this node: reads come only from them
    want = {"all_reduce": 2 * (k - 1) * seg, "reduce_scatter": (k - 1) * seg, "all_gather": (k - 1) * seg,
            "broadcast": 0 if rank == 0 or sym.hier is not None else count * it}
    for name, label in labels:
        got = t.totals(label).get(rank, {"recv": 0})["recv"]
        if sym.hier is None:
            check(f"trace bytes read {name}", got, want[name])
        elif name == "all_reduce" and got != 2 * (k - 1) * (count * it // k):  # within the node only
            failures.append(f"trace {name} (hierarchy): {got} bytes read within the node")


def expect_error(label, kind, fn, needle=None):
    global cases
    cases += 1
    try:
        fn()
    except kind as e:
        if needle and needle not in str(e):
            failures.append(f"{label}: message lacks {needle!r}: {e}")
        return str(e)
    except Exception as e:  # noqa: BLE001
        failures.append(f"{label}: raised {type(e).__name__} instead of {kind.__name__}: {e}")
        return None
    failures.append(f"{label}: did not raise {kind.__name__}")
    return None


def mismatch():
    last = n - 1
    odd = rank == last
    bad = {
        "count": lambda c, x: c.all_reduce(x[:8 if odd else 9]),
        "op": lambda c, x: c.all_reduce(x, op="max" if odd else "sum"),
        "collective": lambda c, x: c.broadcast(x) if odd else c.all_reduce(x),
        "root": lambda c, x: c.broadcast(x, root=0 if odd else last),
        "counts": lambda c, x: c.reduce_scatter(x[:2 * n], counts=[2] * n if odd else [1] * (n - 1) + [n + 1]),
    }
    msgs = {}
    for field, call in bad.items():
        comm = Communicator(timeout=20)
        x = comm.alloc((64,), np.float32)
        x[:] = 1
        comm.all_reduce(x)  # one good call first
        want = None if os.environ.get("COLLECTIVES_NODE_SIZE") else f"{field} differs"  # other nodes: less detail
        msgs[field] = expect_error(f"mismatch {field}", MismatchError, lambda: call(comm, x), want)
        expect_error(f"after mismatch {field}", Exception, lambda: comm.all_reduce(x), "unusable")
        comm.close()
        world.Barrier()
    extra["messages"] = msgs


def absent():
    comm = Communicator(timeout=1.5)
    x = comm.alloc((1024,), np.float32)
    x[:] = 1
    check("before", comm.all_reduce(x), np.full(1024, n, np.float32))
    if rank != n - 1:
        t = time.monotonic()
        extra["message"] = expect_error("absent peer", CollectiveTimeout, lambda: comm.all_reduce(x),
                                        f"rank {n - 1}")
        extra["seconds"] = round(time.monotonic() - t, 2)
    world.Barrier()  # the absent rank waits here until the others have timed out
    if n > 1:
        comm = Communicator(timeout=1.5)  # the second phase: a rank that stops after the header
        x = comm.alloc((1 << 16,), np.float32)
        if rank == n - 1:
            comm.symmetric.signals.post([1] * 12)  # posts the right epoch only: its header is garbage
        else:
            expect_error("garbage header", MismatchError, lambda: comm.all_reduce(x))
        world.Barrier()


def staged():
    """COLLECTIVES_STAGE=1: ordinary arrays take the direct path through the stage
    window (mixed with heap arrays on other ranks); shown by the trace's phases."""
    from collectives.teach.trace import Tracer
    comm = Communicator(timeout=30)
    extra["stage"] = bool(comm.symmetric and comm.symmetric.stage)
    comm.tracer = t = Tracer()
    heap, hout = comm.alloc((200000 * n,), np.float32), comm.alloc((200000 * n,), np.float32)
    for count in (0, 5, 1000, 20000 * n, 200000 * n):  # the last: past every default limit, staged here
        for mixed in (False, True):
            x = heap[:count] if mixed and rank == 0 else np.empty(count, np.float32)
            x[:] = data(count, rank, np.float32)
            want = expected(count, np.float32, "sum")
            check(f"staged all_reduce count={count} mixed={mixed}", comm.all_reduce(x), want)
            c = [count // n] * n
            c[-1] += count - sum(c)
            lo = sum(c[:rank])
            check(f"staged reduce_scatter count={count}", comm.reduce_scatter(x, counts=c), want[lo:lo + c[rank]])
            piece = x[lo:lo + c[rank]].copy()
            check(f"staged all_gather count={count}", comm.all_gather(piece, counts=c),
                  np.concatenate([data(count, q, np.float32)[sum(c[:q]):sum(c[:q + 1])] for q in range(n)]))
            check(f"staged broadcast count={count}", comm.broadcast(x, root=n - 1), data(count, n - 1, np.float32))
            comm.all_reduce(x, out=x)
            check(f"staged all_reduce in place count={count} mixed={mixed}", x, want)
            x[:] = data(count, rank, np.float32)  # staged inputs, outs in the heap (pushed on 3 ranks)
            check(f"staged all_reduce heap out count={count} mixed={mixed}", comm.all_reduce(x, out=hout[:count]),
                  want)
    comm.tracer = None
    phases = {e.get("phase") for e in t.data_events()}
    if n > 1 and not any(str(p).startswith("direct") for p in phases):
        failures.append(f"no direct reads traced: phases {phases}")
    if n > 1 and comm.tuning.stage == "auto" and not any(
            p and not str(p).startswith("direct") for p in phases):
        failures.append(f"large staged calls did not take the ring: phases {phases}")
    extra["phases"] = sorted(map(str, phases))
    back_to_back(comm)
    comm.close()
    stage_edges()


def stage_edges():
    """A staged input exactly half the stage window: copied in before posting, so
    the window must not grow under it (bench/collectives.py's 1 MiB all-gather
    read garbage when it did)."""
    comm = Communicator(timeout=30)
    for count in (65536, 131072):  # 256 KiB (the window: 1 MiB), then 512 KiB, half of it
        x = np.full(count, float(rank + 1), np.float32)
        check(f"stage edge all_reduce count={count}", comm.all_reduce(x), np.full(count, n * (n + 1) / 2, np.float32))
        check(f"stage edge all_gather count={count}", comm.all_gather(x),
              np.repeat(np.arange(1, n + 1, dtype=np.float32), count))
    comm.close()


def back_to_back(comm):
    """Staged calls back to back, values changing every call, one rank now and then
    late: a rank that returns without waiting for its peers must not overwrite a
    stage copy a slower peer is still reading (the halves alternate by call)."""
    global cases
    rng = np.random.default_rng(11)  # the same sizes on every rank
    for i in range(150):
        count = int(rng.integers(1, 1 << 18)) * n
        v = float(i * n + rank + 1)
        want = float(sum(i * n + q + 1 for q in range(n)))
        x = np.full(count, v, np.float32)
        if rank == i % n and i % 5 == 0:
            time.sleep(0.002)
        got = comm.all_reduce(x)
        if not (got == want).all():
            failures.append(f"back to back all_reduce #{i} count={count}: {np.unique(got)[:4]} != {want}")
        got = comm.reduce_scatter(x)
        if not (got == want).all():
            failures.append(f"back to back reduce_scatter #{i} count={count}: {np.unique(got)[:4]} != {want}")
        got = comm.all_gather(x[:count // n])
        if not (got == np.repeat(np.arange(n, dtype=np.float32) + i * n + 1, count // n)).all():
            failures.append(f"back to back all_gather #{i} count={count}")
        cases += 3


def _paths(comm, call, root=None):
    """Run ``call()`` traced; return the set of paths it took: its road (direct or ring), and
    what its data events say (a broadcast's root reads nothing on the direct path)."""
    from collectives.roads import Road
    from collectives.teach.trace import Tracer
    comm.tracer = t = Tracer()
    try:
        got = call()
    finally:
        comm.tracer = None
    road = comm.road_taken()
    paths = {"direct" if road in (Road.DIRECT, Road.ONE_PHASE, Road.PUSH) else "ring"}
    phases = {str(e.get("phase")) for e in t.data_events()}
    if root != rank or phases:
        paths |= {"direct" if p.startswith("direct") else "ring" for p in phases}
    return got, paths


def _communicator(stage, timeout=30.0):
    """A Communicator made with COLLECTIVES_STAGE=stage (None: unset), timed."""
    old = os.environ.pop("COLLECTIVES_STAGE", None)
    if stage is not None:
        os.environ["COLLECTIVES_STAGE"] = stage
    try:
        world.Barrier()
        t = time.perf_counter()
        comm = Communicator(timeout=timeout)
        return comm, time.perf_counter() - t
    finally:
        os.environ.pop("COLLECTIVES_STAGE", None)
        if old is not None:
            os.environ["COLLECTIVES_STAGE"] = old


def defaults():
    """Staging by default: two ranks of one node stage ordinary arrays up to each
    collective's limit and take the ring above it (both sides traced, exact, with a
    heap array on rank 0 too); COLLECTIVES_STAGE=0 never stages, =1 stages every
    size; other world sizes do not stage by default."""
    comm, extra["construct_s"] = _communicator(None)
    STAGE_MAX_BYTES, STAGE_RANKS = comm.tuning.stage_max(), comm.tuning.stage_ranks
    sym = comm.symmetric
    extra["stage"] = bool(sym and sym.stage)
    if n != STAGE_RANKS or int(os.environ.get("COLLECTIVES_NODE_SIZE") or n) < n:
        if sym is not None:  # measured on one node of STAGE_RANKS only; several nodes: the ring
            failures.append(f"{n} ranks (COLLECTIVES_NODE_SIZE={os.environ.get('COLLECTIVES_NODE_SIZE')}): "
                            f"staged by default, but the limits were measured on one node of {STAGE_RANKS}")
        comm.close()
        return
    if sym is None or comm.tuning.stage != "auto":
        failures.append(f"two ranks: no default staging ({sym})")
        return
    extra["memory_at_start"] = comm.memory_bytes()["symmetric"]
    off, extra["construct_off_s"] = _communicator("0")
    on, _ = _communicator("1")
    if off.symmetric is not None or not on.symmetric.stage or on.tuning.stage != "1":
        failures.append("COLLECTIVES_STAGE=0 staged, or =1 did not stage every size")
    heap = comm.alloc((1 << 20,), np.float32)
    item = 4
    for kind, limit in STAGE_MAX_BYTES.items():
        k = limit // item
        # all-gather pieces, a broadcast root's private input and all-reduces past the limit are read in place
        # (process_vm_readv, cma.py) where the kernel allows it: the direct path at every size, no stage copy
        above = "direct" if kind in ("all_gather", "broadcast") and sym.direct.pids is not None else "ring"
        for count, want_path in ((k, "direct"), (k + 64, above)):
            for mixed in (False, True):
                # so are all-reduces (x and out) up to cma_max_all_reduce, out of place from cma_min_all_reduce
                # below the limit too; unless one is in the heap (mixed): then every rank takes the ring
                path = want_path
                if kind == "all_reduce" and sym.direct.pids is not None and \
                        (count > k or count * item >= comm.tuning.cma_min_all_reduce):
                    path = "ring" if mixed else "direct"
                def run(c, x):
                    if kind == "all_reduce":
                        return c.all_reduce(x), expected(count, np.float32, "sum")
                    if kind == "reduce_scatter":
                        return c.reduce_scatter(x), expected(count, np.float32, "sum")[rank * count // n:
                                                                                     (rank + 1) * count // n]
                    if kind == "all_gather":  # the limit is on the piece
                        return c.all_gather(x), np.concatenate([data(count, q, np.float32) for q in range(n)])
                    return c.broadcast(x, root=n - 1), data(count, n - 1, np.float32)
                x = heap[:count] if mixed and rank == 0 else np.empty(count, np.float32)
                x[:] = data(count, rank, np.float32)
                label = f"default {kind} {count * item} bytes mixed={mixed}"
                root = n - 1 if kind == "broadcast" else None
                (got, want), paths = _paths(comm, lambda: run(comm, x), root)
                check(label, got, want)
                if paths != {path}:
                    failures.append(f"{label}: paths {sorted(paths)}, want {path} (limit {limit})")
                if not mixed:  # =0: the ring; =1: staged at every size
                    for c, forced in ((off, "ring"), (on, "direct")):
                        (got, want), paths = _paths(c, lambda: run(c, x), root)
                        check(f"{label} forced {forced}", got, want)
                        if paths != {forced}:
                            failures.append(f"{label}, forced {forced}: paths {sorted(paths)}")
    extra["memory_after"] = comm.memory_bytes()["symmetric"]
    stage = comm.symmetric.heap._scratch.get("stage")
    extra["stage_window"] = stage.nbytes if stage is not None else 0
    if extra["stage_window"] > 2 * max(STAGE_MAX_BYTES.values()):
        failures.append(f"stage window {extra['stage_window']} past twice the largest limit")
    for c in (comm, off, on):
        c.close()
    # not staged, a heap array on one rank and an ordinary one on the other split into
    # the direct path and the ring: each side times out at the deadline naming the other
    split, _ = _communicator("0", timeout=0.5)
    hx = split.alloc((256,), np.float32)
    y = hx if rank == 0 else np.ones(256, np.float32)
    t = time.monotonic()
    extra["split_message"] = expect_error("heap vs ordinary, not staged", CollectiveTimeout,
                                          lambda: split.all_reduce(y), f"rank {1 - rank}")
    extra["split_seconds"] = round(time.monotonic() - t, 2)
    world.Barrier()


{"grid": grid, "mismatch": mismatch, "absent": absent, "staged": staged, "defaults": defaults}[mode]()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures[:20], "nfail": len(failures), **extra}),
      flush=True)
