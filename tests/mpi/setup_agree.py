"""Agreed setup steps over the MPI bootstrap (run by tests/test_setup.py on 3 ranks).

1. A step that fails on rank 1 only: every rank raises the same SetupError naming it.
2. A step rank 2 never joins: ranks 0 and 1 raise at the bootstrap's deadline, naming
   the step, instead of hanging; rank 2 joins late, so the abandoned exchange completes.
"""
import time

from collectives.bootstrap.mpi import ABANDONED, MpiBootstrap
from collectives.errors import SetupError

boot = MpiBootstrap(timeout=1.0)
try:
    boot.agree(boot.rank != 1, "a probe", "no luck")
    print(f"rank {boot.rank}: NO ERROR", flush=True)
except SetupError as e:
    print(f"rank {boot.rank}: SetupError: {e}", flush=True)
if boot.rank == 2:
    time.sleep(2.5)
    boot.barrier()
else:
    try:
        boot.barrier()
    except SetupError as e:
        print(f"deadline on rank {boot.rank}: {e}", flush=True)
    for req, _ in ABANDONED:
        req.Wait()
boot.timeout = 30
boot.barrier()
