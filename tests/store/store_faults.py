"""Run under torchrun at 3 ranks: failures in a store world end in errors that name the
absent rank, and leave nothing behind.

1. A setup step rank 2 never joins: ranks 0 and 1 raise SetupError naming the step and rank 2.
2. An all-reduce rank 2 never calls: ranks 0 and 1 raise CollectiveTimeout naming rank 2
   (the census's notices over Gloo, probed through the store), within the timeout and grace.
3. Every communicator closes: no waiting thread is left, and the process exits cleanly
   (a thread left blocked in Gloo would abort it at exit).
Prints "PASS <case>" / "FAIL <case> ..." per rank and "OK rank r" at the end.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta

import numpy as np
import torch.distributed as dist

from collectives import Communicator, CollectiveTimeout, SetupError
from collectives.bootstrap.store import StoreBootstrap

R, N = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), N, False,
                      timeout=timedelta(seconds=60))
bad: list[str] = []


def result(case: str, ok: bool, detail: str = "") -> None:
    print(f"PASS {case}" if ok else f"FAIL {case} rank {R}: {detail}", flush=True)
    if not ok:
        bad.append(case)


boot = StoreBootstrap(store, R, N, timeout=2, prefix="faults")
if R < 2:
    t0 = time.monotonic()
    try:
        boot.barrier()
        result("setup step", False, "no error")
    except SetupError as e:
        ok = "setup step 'barrier' timed out after 2 s" in str(e) and "rank(s) [2] of 3 never joined" in str(e)
        result("setup step", ok and time.monotonic() - t0 < 20, str(e))
done = StoreBootstrap(store, R, N, timeout=30, prefix="sync")
done.barrier()

comm = Communicator(bootstrap=StoreBootstrap(store, R, N, timeout=30, prefix="comm"), timeout=3, stage="0")
x = np.ones(300_001, np.float32)
comm.all_reduce(x)  # every rank: the transport works
if R < 2:
    t0 = time.monotonic()
    try:
        comm.all_reduce(x)
        result("collective timeout", False, "no error")
    except CollectiveTimeout as e:
        took = time.monotonic() - t0
        ok = "rank 2 never arrived" in str(e) and f"rank {R}:" in str(e)
        result("collective timeout", ok and took < 3 + 2 + 15, f"after {took:.1f} s: {e}")  # timeout, grace, load
        print(f"rank {R} after {took:.1f} s: {e}", flush=True)
done.barrier()
t0 = time.monotonic()
comm.close()
left = [t.name for t in threading.enumerate() if t.name.startswith("gloo-wait")]
result("close releases every waiting thread", not left and time.monotonic() - t0 < 10, f"{left}")
done.barrier()
print(f"OK rank {R}" if not bad else f"rank {R}: failed {bad}", flush=True)
sys.exit(1 if bad else 0)
