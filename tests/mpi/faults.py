"""Run under mpirun: mismatches and timeouts must fail on every rank, with names.

Usage: faults.py CASE; prints one JSON line per rank: {"rank", "error", "message"}.
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from collectives import CollectiveError, Communicator
from collectives.host.ring import TAG_DATA

case = sys.argv[1]
rank, n = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
comm = Communicator(timeout=float(sys.argv[2]) if len(sys.argv) > 2 else 20.0, chunk_bytes=4096)
x = np.arange(10000, dtype=np.float32)
out = {"rank": rank, "error": None, "message": ""}
GUARD = 4096  # zeros after each ring_* case's output: a receive must never write past its buffer


def guarded(count):
    """An output of ``count`` elements with a guard region of zeros behind it."""
    buf = np.zeros(count + GUARD, np.float32)
    out["guard"] = buf[count:]
    return buf[:count]
try:
    comm.all_reduce(x)  # one good call first: sequence numbers advance together
    if case == "count":
        comm.all_reduce(x[: 10000 - (rank == n - 1)])
    elif case == "op":
        comm.all_reduce(x, op="max" if rank == 1 else "sum")
    elif case == "dtype":
        comm.all_reduce(x.astype(np.float64) if rank == 0 else x)
    elif case == "order":
        if rank == 0:
            comm.all_gather(x)
        else:
            comm.all_reduce(x)
    elif case == "gather_counts":
        comm.all_gather(x[: 100 + rank])
    elif case == "ring_count":  # both ranks on the ring path, sends posted before the verdict
        k = (1 << 18) - 64 * (rank == n - 1)
        comm.all_reduce(np.ones(k, np.float32), out=guarded(k))
    elif case == "ring_op":
        comm.reduce_scatter(np.ones(n << 16, np.float32), op="max" if rank == 0 else "sum", out=guarded(1 << 16))
    elif case == "ring_gather":  # pieces of different sizes: a receive posted early would overflow
        k = (1 << 16) + 1000 * rank
        comm.all_gather(np.ones(k, np.float32), out=guarded(k * n))
    elif case == "barrier_vs_small":  # rank 0's header message carries 4000 bytes of payload
        if rank == 0:
            comm.all_reduce(np.ones(1000, np.float32))
        else:
            comm.barrier()
    elif case == "small_bytes":  # rank 0 takes the small path with a payload past the others' small_bytes
        odd = Communicator(timeout=20, small_bytes=(1 << 18) if rank == 0 else 4096)
        odd.all_reduce(np.ones(1 << 16, np.float32))
    elif case == "absent":  # rank 1 never calls: the others time out naming it
        if rank != 1:
            comm.all_reduce(x)
        else:
            time.sleep(float(sys.argv[2]) * 3)
    elif case == "absent_rank":  # rank argv[3] never calls; the ranks waiting on others must name it too
        if rank != int(sys.argv[3]):
            comm.all_reduce(x)
        else:
            time.sleep(float(sys.argv[2]) * 4)
    elif case == "drop":  # rank 1 drops its data sends: its neighbour times out mid-ring
        if rank == 1:
            comm.transport.fault = lambda kind, peer, tag: tag == TAG_DATA
        comm.tuning.cma_max_all_reduce = 0  # past the stage limit, not read in place: the messages of the pair
        comm.all_reduce(np.ones(comm.tuning.stage_max_all_reduce // 2, np.float32))
    elif case == "after_error":
        comm.all_reduce(x[: 10000 - rank])
    elif case == "late":  # rank 1 forwards its ring data two timeouts late; its right neighbour gives up first
        T = float(sys.argv[2])
        if rank == 1:
            send, sent = comm.transport.isend, []

            def late_send(buf, peer, tag):
                if tag == TAG_DATA:
                    sent.append(tag)
                    if len(sent) == 17:  # its own 16 chunks went before the header verdict; now forwarding
                        time.sleep(2 * T)
                return send(buf, peer, tag)
            comm.transport.isend = late_send
        late_out = np.zeros(n << 14, np.float32)
        comm.all_gather(np.full(1 << 14, rank + 1, np.float32), out=late_out)
    out["message"] = "no error"
except CollectiveError as e:
    out["error"], out["message"] = type(e).__name__, str(e)
if case == "late":  # after the error, nothing may land in the output any more
    late_out[:] = 0
    t_end = time.monotonic() + 3 * float(sys.argv[2])
    while time.monotonic() < t_end:  # drive MPI's progress while rank 1's late data arrives
        MPI.COMM_WORLD.Iprobe()
        time.sleep(0.01)
    out["late_writes"] = int(np.count_nonzero(late_out))
if "guard" in out:
    out["guard"] = int(np.count_nonzero(out["guard"]))  # elements written past the output
if case.startswith("ring_"):  # nothing leaked: a fresh communicator works, and so does MPI
    fresh = Communicator(timeout=20)
    y = fresh.all_reduce(np.full(1 << 18, rank + 1, np.float32))
    out["fresh_ok"] = bool((y == n * (n + 1) / 2).all())
    fresh.close()
if case == "after_error":  # the communicator refuses further use
    try:
        comm.all_reduce(x)
        out["second"] = "no error"
    except CollectiveError as e:
        out["second"] = str(e)
print(json.dumps(out), flush=True)
sys.stdout.flush()
MPI.COMM_WORLD.Barrier() if case not in ("absent", "absent_rank", "drop", "late") else None
