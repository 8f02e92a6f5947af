"""Run under torchrun (any world size): the Communicator of a store world, over
StoreBootstrap and the Gloo transport, exact against numpy; the setup calls; the
device transport's mode agreed over the store; the MPI baseline refused by name;
and MPI never initialised. Prints "FAIL ..." lines and "OK rank r checks k".

    torchrun --standalone --nproc-per-node 3 tests/store/store_check.py
"""
from __future__ import annotations

import os
import sys
import threading
from datetime import timedelta

import numpy as np
import torch.distributed as dist

from collectives import Communicator
from collectives.bootstrap.store import StoreBootstrap
from collectives.transport.device import choose_mode

R, N = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), N, False,
                      timeout=timedelta(seconds=60))
failures: list[str] = []
checks = 0


def check(ok: bool, what: str) -> None:
    global checks
    checks += 1
    if not ok:
        failures.append(f"FAIL rank {R}: {what}")


boot = StoreBootstrap(store, R, N, timeout=30, prefix="check")
check(boot.allgather_obj(R * 7) == [q * 7 for q in range(N)], "allgather")
check(boot.broadcast_obj({"from": N - 1} if R == N - 1 else None, N - 1) == {"from": N - 1}, "broadcast")
boot.barrier()
odd = boot.split(R % 2, -R)  # key -R: the odd ranks in reverse
members = [q for q in range(N) if q % 2 == R % 2][::-1]
check((odd.rank, odd.size) == (members.index(R), len(members)), f"split: {odd.rank}/{odd.size}")
check(odd.allgather_obj(R) == members, "allgather in a split")
check(choose_mode(boot) == "ipc", "device transport mode 'auto' on one node")
big = bytes(range(256)) * 4096  # a megabyte through the store
check(boot.broadcast(big if R == 0 else None, 0) == big, "a large broadcast")

for chunk in (4096, None):  # tiny chunks: the multi-chunk paths of the ring over Gloo
    comm = Communicator(bootstrap=StoreBootstrap(store, R, N, timeout=30, prefix=f"comm{chunk}"), timeout=30,
                        chunk_bytes=chunk, stage="0")
    check(type(comm.transport).__name__ == "GlooTransport", f"transport is {type(comm.transport).__name__}")
    for count in (0, 1, 7, 1000, 65_537, 300_001):
        for dtype in (np.float32, np.int64):
            ins = [((np.arange(count) * 3 + q) % 11).astype(dtype) for q in range(N)]
            got = comm.all_reduce(ins[R])
            check(np.array_equal(got, np.sum(ins, axis=0, dtype=np.float64).astype(dtype)), f"all_reduce {count}")
            got = comm.all_gather(ins[R])
            check(np.array_equal(got, np.concatenate(ins)), f"all_gather {count} {dtype}")
            if count % N == 0:
                got = comm.reduce_scatter(np.concatenate(ins), out=np.empty(count, dtype))
                want = np.sum([np.concatenate(ins)] * N, axis=0).reshape(N, -1)[R]
                check(np.array_equal(got, want), f"reduce_scatter {count}")
            got = comm.broadcast(ins[R], root=N - 1)
            check(np.array_equal(got, ins[N - 1]), f"broadcast {count}")
    heap = comm.alloc((1 << 16,), np.float32)  # the heap over the store: direct roads, as under mpirun
    heap[:] = R + 1
    comm.all_reduce(heap, out=heap)
    check(np.all(heap == N * (N + 1) / 2) and str(comm.road_taken()) != "ring", f"heap road {comm.road_taken()}")
    comm.barrier()
    comm.close()

try:
    Communicator(bootstrap=StoreBootstrap(store, R, N, timeout=30, prefix="mpi"), algorithm="mpi")
    check(False, "the MPI baseline in a store world did not raise")
except ValueError as e:
    check("needs an MPI world" in str(e) and "algorithm='ring'" in str(e), f"MPI baseline error: {e}")
check("mpi4py.MPI" not in sys.modules, "a store world imported mpi4py.MPI (which initialises MPI)")
waiters = [t.name for t in threading.enumerate() if t.name.startswith("gloo-wait")]
check(not waiters, f"waiting threads left after close: {waiters}")
for f in failures[:20]:
    print(f, flush=True)
print(f"OK rank {R} checks {checks}" if not failures else f"rank {R}: {len(failures)} of {checks} failed", flush=True)
sys.exit(1 if failures else 0)
