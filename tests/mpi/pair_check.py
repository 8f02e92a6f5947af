"""Run under mpirun -n 2: the ring's two-rank paths (collectives/pair.py) over real MPI.

All-reduce in and out of place (also through another object over x's memory)
and reduce-scatter, every op, a few dtypes, and broadcast, at sizes past the
staging limit (so a staging communicator hands them to the ring after its
shared-memory header check) and on a communicator that never stages; in place
past the tuning table's pair_inplace_bytes (in blocks through bounded scratch). All-gather with pieces past
the staging limit, uneven, empty, in place. Each result is checked against
numpy and against MPI's own collective, bit for bit, and each case must have
moved its data on the ring (counted at the transport), with each segment as
one message where the two-rank path runs (none where a staging communicator
reads in place: all-reduces, all-gather pieces, broadcasts). Prints one JSON line per rank:
{"rank", "cases", "counted" (cases whose message count was right), "failures"}.
"""
import json
import os
import sys

import numpy as np

from collectives import Communicator
from collectives.host import ring
from collectives.tuning import defaults
from collectives.host.schedule import split_counts
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inputs import data  # noqa: E402  (tests/inputs.py)

world = MPI.COMM_WORLD
rank = world.rank
assert world.size == 2, "pair_check.py runs on two ranks"
OPS = ["sum", "avg", "max", "min", "prod"]

staging = Communicator(timeout=60)
os.environ["COLLECTIVES_STAGE"] = "0"
plain = Communicator(timeout=60)
del os.environ["COLLECTIVES_STAGE"]
mpi = Communicator(algorithm="mpi", timeout=60)
assert staging.symmetric is not None and plain.symmetric is None, "staging on two ranks, off when asked"

sent = [0]


def counting(transport):
    """Count the ring's data messages this rank sends (not the header agreement's)."""
    isend = transport.isend

    def wrapped(buf, peer, tag):
        if tag in (ring.TAG_DATA, ring.TAG_GATHER):
            sent[0] += 1
        return isend(buf, peer, tag)

    transport.isend = wrapped


counting(staging.transport)
counting(plain.transport)
failures, cases, counted = [], 0, 0


def check(label, got, want, base, messages, expect):
    """``expect``: the data messages this rank must have sent (each segment or piece
    whole), or None for more than the one-message path's two (in place past the scratch
    bound: two a block)."""
    global cases, counted
    cases += 1
    if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
        bad = np.flatnonzero(got.astype(np.float64) != want.astype(np.float64))
        failures.append(f"{label}: {bad.size} wrong, first at {bad[:3].tolist()}")
    if not np.array_equal(got.view(np.uint8), base.view(np.uint8)):
        failures.append(f"{label}: differs from MPI's own collective")
    if messages == expect if expect is not None else messages > 2:
        counted += 1
    else:
        failures.append(f"{label}: sent {messages} data messages on the ring, expected "
                        f"{expect if expect is not None else 'more than 2 (blocks)'}")


def reduce_input(count, r, dt, op):
    """data(), times 2 for a floating avg (avg divides floats by 2 first: exact)."""
    x = data(count, r, dt, op)
    return (x.astype(np.float64) * 2).astype(dt) if op == "avg" and np.dtype(dt).kind != "i" else x


def expected(count, dt, op):
    a, b = (data(count, r, np.float64, op) for r in range(2))
    e = {"sum": a + b, "avg": a + b, "max": np.maximum(a, b), "min": np.minimum(a, b), "prod": a * b}[op]
    if op == "avg" and np.dtype(dt).kind == "i":
        e = np.trunc((a + b) / 2)
    return e.astype(dt)


TWO_RANK_SCRATCH_BYTES = defaults().pair_inplace_bytes
big = 2 * TWO_RANK_SCRATCH_BYTES  # in place: segments past the scratch bound
AR = staging.tuning.stage_max_all_reduce  # the sizes below are past it: the ring, not the heap
GRID = [(np.float32, AR + 4, OPS), (np.float32, AR + (2 << 20) + 12, OPS),
        (np.float32, max(big, AR) + 20, ["sum", "avg"]), (np.float16, AR + 4, OPS), (np.int32, AR + 4, OPS)]
for dt, nbytes, ops in GRID:
    dt = np.dtype(dt)
    count = nbytes // dt.itemsize
    for op in ops:
        x0 = reduce_input(count, rank, dt, op)
        want = expected(count, dt, op)
        base = mpi.all_reduce(x0, op=op)
        for name, comm in (("staging", staging), ("plain", plain)):
            for in_place in (False, True, "view"):
                label = f"all_reduce {name} {dt} {nbytes} B {op} {'out' if not in_place else 'in place'}" + \
                    (" through a view of x" if in_place == "view" else "")
                x = x0.copy()
                sent[0] = 0
                # in place, also as another object over x's very memory (the aliasing rule allows it)
                got = comm.all_reduce(x, op=op, out=None if not in_place else x if in_place is True else x[:])
                if not in_place and not np.array_equal(x, x0):
                    failures.append(f"{label}: input modified")
                seg = max(split_counts(count, 2, 64 // dt.itemsize)) * dt.itemsize
                # a floating avg without staging is divided into out first, then reduced there in place
                own_out = in_place or (name == "plain" and op == "avg" and dt.kind == "f")
                whole = not own_out or seg <= TWO_RANK_SCRATCH_BYTES
                # a staging communicator reads every x and out in place where the kernel allows it
                read = name == "staging" and staging.symmetric.direct.pids is not None \
                    and nbytes <= staging.tuning.cma_max_all_reduce
                check(label, got, want, base, sent[0], 0 if read else 2 if whole else None)

RS = staging.tuning.stage_max_reduce_scatter
for dt, nbytes in ((np.float32, RS + 8), (np.float16, RS + (2 << 20) + 4)):  # past the staging limit
    dt = np.dtype(dt)
    count = nbytes // dt.itemsize
    counts = [count // 2 - 3, count - count // 2 + 3]
    lo = sum(counts[:rank])
    for op in OPS:
        x0 = reduce_input(count, rank, dt, op)
        want = expected(count, dt, op)[lo:lo + counts[rank]]
        base = mpi.reduce_scatter(x0, op=op, counts=counts)
        for name, comm in (("staging", staging), ("plain", plain)):
            label = f"reduce_scatter {name} {dt} {nbytes} B {op}"
            sent[0] = 0
            got = comm.reduce_scatter(x0, op=op, counts=counts)
            check(label, got, want, base, sent[0], 1)
            if not np.array_equal(x0, reduce_input(count, rank, dt, op)):
                failures.append(f"{label}: input modified")

count = (staging.tuning.stage_max_broadcast + 8) // 4  # float32 past the staging limit
for root in (0, 1):
    want = data(count, root, np.float32)
    for name, comm in (("staging", staging), ("plain", plain)):
        # a staging communicator's other rank reads the root's input in place where the kernel allows
        # it (process_vm_readv, collectives/symmetric/cma.py): no ring, no message
        msgs = 0 if name == "staging" and staging.symmetric.direct.pids is not None else 1 if rank == root else 0
        x = data(count, rank, np.float32)
        sent[0] = 0
        got = comm.broadcast(x, root=root)
        check(f"broadcast {name} root {root}", got, want, want, sent[0], msgs)
        sent[0] = 0
        comm.broadcast(x, root=root, out=x)
        check(f"broadcast {name} root {root} in place", x, want, want, sent[0], msgs)

piece = (staging.tuning.stage_max_all_gather + (88 << 10)) // 4 + 1  # float32 pieces past the staging limit
for counts in ([piece, piece], [piece + 5, 0], [3, piece]):
    want = np.concatenate([data(k, q, np.float32) for q, k in enumerate(counts)])
    x0 = data(counts[rank], rank, np.float32)
    even = counts[0] == counts[1]
    base = mpi.all_gather(x0, counts=None if even else counts)
    lo = sum(counts[:rank])
    for name, comm in (("staging", staging), ("plain", plain)):
        label = f"all_gather {name} {counts}"
        # a staging communicator reads these pieces in place where the kernel allows it
        # (process_vm_readv, collectives/symmetric/cma.py): no ring, no message
        msgs = 0 if name == "staging" and staging.symmetric.direct.pids is not None else 1 if counts[rank] else 0
        sent[0] = 0
        got = comm.all_gather(x0, counts=None if even else counts)
        check(label, got, want, base, sent[0], msgs)
        o = np.full(sum(counts), -99, np.float32)
        o[lo:lo + counts[rank]] = x0
        sent[0] = 0
        comm.all_gather(o[lo:lo + counts[rank]], out=o, counts=None if even else counts)
        # in place (x inside out): read in place too past the stage limit, where staging would
        # leave for the ring (cma.py's offers)
        check(label + " in place", o, want, base, sent[0], msgs)

for c in (staging, plain, mpi):
    c.close()
print(json.dumps({"rank": rank, "cases": cases, "counted": counted, "failures": failures[:20]}), flush=True)
