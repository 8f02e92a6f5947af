"""Run under mpirun: the runtime's promises that need real ranks, several cases in one launch.

Usage: runtime_checks.py; prints one JSON line per rank: {"rank", "failures": [...]}.
- small-path max/min: every rank ends with the same bits, signed zeros and NaN
  payloads included (issue 11, defect 5);
- MpiTransport.cancel: a receive that already matched is completed and reported
  as landed, one that never matched is cancelled and reported so.
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from collectives import Communicator
from collectives.dtypes import bfloat16

world = MPI.COMM_WORLD
rank, n = world.rank, world.size
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


# ---- small path: the same bits on every rank
comm = Communicator(timeout=30)
QNAN_A, QNAN_B = 0x7FC00001, 0x7FC00002  # two NaNs that differ only in payload
for dt in (np.float32, np.float64, np.float16, bfloat16):
    for op in ("max", "min"):
        # rank r holds +0 where r is even and -0 where odd, then NaNs with rank-dependent payloads
        zeros = np.array([0.0 if (rank + k) % 2 == 0 else -0.0 for k in range(8)], np.float32)
        nan = np.array([QNAN_A if rank % 2 else QNAN_B] * 4, np.uint32).view(np.float32)
        x = np.concatenate([zeros, nan, np.full(4, rank, np.float32)]).astype(dt)
        got = comm.all_reduce(x, op=op)
        everyone = world.allgather(got.view(np.uint8).tobytes())
        check(all(b == everyone[0] for b in everyone), f"all_reduce {op} {np.dtype(dt).name}: "
              f"ranks hold different bits")
        rs = comm.reduce_scatter(np.tile(x, n), op=op)
        check(np.array_equal(rs.view(np.uint8), got.view(np.uint8)),
              f"reduce_scatter {op} {np.dtype(dt).name}: other bits than all_reduce")
        # values (not bits) against numpy over every rank's input
        want = (np.maximum if op == "max" else np.minimum).reduce(
            np.stack(world.allgather(x.astype(np.float64))), axis=0)
        check(np.array_equal(got.astype(np.float64), want, equal_nan=True), f"{op} values")

# ---- MpiTransport.cancel: check the outcome and complete the request
t = comm.transport
peer = (rank + 1) % n
src = (rank - 1) % n
buf = np.full(4, -1, np.int32)
matched = t.irecv(buf, src, 99)
t.isend(np.full(4, rank, np.int32), peer, 99).Wait()
world.Barrier()
time.sleep(0.2)  # the 16-byte message from src is here: the receive has matched
never = t.irecv(np.zeros(4, np.int32), src, 98)
landed = t.cancel([matched, never])
check(matched == MPI.REQUEST_NULL and never == MPI.REQUEST_NULL, "cancel left a request incomplete")
check(landed == [0], f"cancel reported {landed} as landed, want [0] (the matched receive)")
check(buf.tolist() == [src] * 4, f"the matched receive's bytes: {buf.tolist()}")
world.Barrier()

print(json.dumps({"rank": rank, "failures": failures}), flush=True)
comm.close()
sys.exit(0)
