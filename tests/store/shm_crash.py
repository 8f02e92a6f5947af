"""One rank of a two-rank store world that makes a heap window (started by the test
with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and RINGZERO_SHM_DIR set).

    python tests/store/shm_crash.py crash   # rank 1 dies between creating its segment and the agreement
    python tests/store/shm_crash.py clean   # both make the window; lists what is left in the folder

Prints one "rank r: ..." line: the error rank 0 got, or what the folder holds.
"""
from __future__ import annotations

import os
import sys
from datetime import timedelta

import numpy as np
import torch.distributed as dist

from collectives import Communicator, SetupError
from collectives.bootstrap.store import StoreBootstrap

R, N = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
mode, shm = sys.argv[1], os.environ["RINGZERO_SHM_DIR"]
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), N, R == 0,
                      timeout=timedelta(seconds=30))
comm = Communicator(bootstrap=StoreBootstrap(store, R, N, timeout=3), timeout=10, stage="0")
if mode == "crash" and R == 1:
    agree = StoreBootstrap.agree

    def dies(self, ok, what, *args, **kwargs):
        if what.startswith("heap window"):
            os._exit(3)  # the segment file exists, nobody will unlink it
        return agree(self, ok, what, *args, **kwargs)
    StoreBootstrap.agree = dies
try:
    a = comm.alloc((1000,), np.float32)
    a[:] = R + 1
    comm.all_reduce(a, out=a)
    print(f"rank {R}: sum {a[0]:g}, left in the folder: {sorted(os.listdir(shm))}", flush=True)
    comm.close()
    print(f"rank {R}: closed, left: {sorted(os.listdir(shm))}", flush=True)
except SetupError as e:
    print(f"rank {R}: {type(e).__name__}: {e}", flush=True)
    sys.exit(2)
