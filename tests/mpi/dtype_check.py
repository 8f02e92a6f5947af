"""Run under mpirun: every dtype of the table through the numpy API, on every road.

For each dtype and each op it takes: all_reduce and reduce_scatter (uneven
counts), and all_gather (uneven pieces) and broadcast, on

- the default roads of ordinary arrays (small path, pair or ring, staging),
- the ring with tiny chunks, and forced roads: small, ring, pair (2 ranks),
- MPI's own collectives (algorithm="mpi"),
- heap arrays (the direct roads: read in place, one-phase, push), and
  staged ordinary arrays on the staged ring and, for gathers, the pipe,

exact against numpy (tests/dtype_cases.py). The pipe's C loop reduces only
what fast/codes.py says, so a forced pipe all-reduce of another dtype must
raise RoadError before a byte moves. Prints one JSON line per rank:
{"rank", "cases", "failures": [...], "nfail"}.
"""
import json
import os
import sys

import numpy as np
from mpi4py import MPI

from collectives import Communicator
from collectives.dtypes import DTYPES
from collectives.errors import RoadError
from collectives.safety.agree import MAX_SMALL_BYTES
from collectives.fast.codes import c_reduces

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dtype_cases import NEW, data, expected, ops_of, same  # noqa: E402  (tests/dtype_cases.py)

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
COUNTS = [0, 1, 13, 1000, 40001]  # 40001: past the small path for every item size but one byte
failures, cases = [], 0


def check(label, got, want):
    global cases
    cases += 1
    if not same(got, want):
        failures.append(f"{label}: got {np.asarray(got)[:6]} want {np.asarray(want)[:6]}")


def split(count):
    """Uneven counts, rank 0's the smallest (zero when count < n)."""
    base = [count // n] * n
    for q in range(count % n):
        base[n - 1 - q] += 1
    return base


def grid(cname, comm, heap=False, collectives=("all_reduce", "reduce_scatter", "all_gather", "broadcast"),
         names=tuple(DTYPES), small=False, counts=COUNTS):
    for name in names:
        dt = DTYPES[name].numpy
        if heap:  # every input and out in the heap, apart: the direct roads, push included
            hx, ho = comm.alloc((max(COUNTS),), dt), comm.alloc((max(COUNTS),), dt)
        for count in counts:
            if small and count * dt.itemsize > MAX_SMALL_BYTES:
                continue  # more than a header message holds
            cts = split(count)
            lo = sum(cts[:rank])
            for op in ops_of(name):
                x = data(name, count, rank, op, n)
                want = expected(name, count, op, n)
                tag = f"{cname} {name} {op} count={count}"
                if heap:
                    hx[:count] = x
                    x, out = hx[:count], ho[:count]
                else:
                    out = None
                if "all_reduce" in collectives:
                    got = comm.all_reduce(x, op=op, out=out)
                    check(f"all_reduce {tag}", got, want)
                    if not heap:
                        y = x.copy()
                        comm.all_reduce(y, op=op, out=y)
                        check(f"all_reduce in place {tag}", y, want)
                if "reduce_scatter" in collectives:
                    got = comm.reduce_scatter(x, op=op, counts=cts, out=None if not heap else ho[:cts[rank]])
                    check(f"reduce_scatter {tag} counts={cts}", got, want[lo:lo + cts[rank]])
            if "all_gather" in collectives:
                piece = data(name, cts[rank], rank)
                want = np.concatenate([data(name, cts[q], q) for q in range(n)])
                if heap:
                    hx[:cts[rank]] = piece
                    piece = hx[:cts[rank]]
                got = comm.all_gather(piece, counts=cts, out=None if not heap else ho[:count])
                check(f"all_gather {cname} {name} counts={cts}", got, want)
            if "broadcast" in collectives:
                root = count % n
                x = data(name, count, rank)
                if heap:
                    hx[:count] = x
                    x = hx[:count]
                got = comm.broadcast(x, root=root, out=None if not heap else ho[:count])
                check(f"broadcast {cname} {name} count={count} root={root}", got, data(name, count, root))


def run(cname, make, **kw):
    comm = make()
    try:
        grid(cname, comm, **kw)
    except Exception as e:  # noqa: BLE001  reported, then the next configuration
        failures.append(f"{cname}: {type(e).__name__}: {e}")
    finally:
        comm.close()


run("default", lambda: Communicator(timeout=60))
run("ring/tiny-chunks", lambda: Communicator(chunk_bytes=64, small_bytes=256, timeout=60, stage="0"),
    counts=COUNTS[:-1])  # 64-byte chunks: many chunks already at 1000 elements
run("road=ring", lambda: Communicator(road="ring", timeout=60, stage="0"), names=NEW)
run("road=small", lambda: Communicator(road="small", timeout=60, stage="0"), names=NEW, small=True,
    collectives=("all_reduce", "reduce_scatter", "all_gather"))
if n == 2:
    run("road=pair", lambda: Communicator(road="pair", timeout=60, stage="0"), names=NEW)
run("mpi", lambda: Communicator(algorithm="mpi", timeout=60))
run("heap", lambda: Communicator(timeout=60, stage="0"), heap=True)
run("heap road=direct", lambda: Communicator(road="direct", timeout=60, stage="0"), heap=True, names=NEW)
run("heap road=one-phase", lambda: Communicator(road="one-phase", timeout=60, stage="0"), heap=True, names=NEW,
    collectives=("all_reduce",))
run("heap road=push", lambda: Communicator(road="push", timeout=60, stage="0"), heap=True, names=NEW,
    collectives=("all_reduce", "all_gather"))
run("staged road=staged-ring", lambda: Communicator(road="staged-ring", timeout=60, stage="1"), names=NEW)
run("staged road=pipe", lambda: Communicator(road="pipe", timeout=60, stage="1"), names=NEW,
    collectives=("all_gather",))

# the pipe's C loop: an all-reduce of a dtype it lacks is refused before a byte moves, and the
# communicator goes on
comm = Communicator(road="pipe", timeout=60, stage="1")
for name in NEW:
    for op in ops_of(name):
        if c_reduces(DTYPES[name].numpy, op, pipe=True):
            failures.append(f"the pipe claims {op} of {name}")
            continue
        cases += 1
        try:
            comm.all_reduce(data(name, 1000, rank, op, n), op=op)
            failures.append(f"road=pipe all_reduce {name} {op}: no RoadError")
        except RoadError as e:
            if f"no {op} of {name}" not in str(e):
                failures.append(f"road=pipe all_reduce {name} {op}: {e}")
check("after the refusals", comm.all_gather(np.arange(3, dtype=np.int8) + rank),
      np.concatenate([np.arange(3, dtype=np.int8) + q for q in range(n)]))
comm.close()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures[:20], "nfail": len(failures)}), flush=True)
