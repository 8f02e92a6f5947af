"""One async 1 KiB all-reduce, layer by layer: the Communicator's call, the ringzero group's
method, torch's ProcessGroup dispatch, and dist.all_reduce, each waited on at once, beside
the blocking dist.all_reduce. Time per call, the slowest rank's, for 3 rounds of 4000 calls.

    mpirun -n 2 python layers.py
"""
import os
import sys
import time

from mpi4py import MPI

sys.path.append(os.path.join(os.path.dirname(__file__), "..", ".."))  # after the checkout under test
from torch_groups import init_groups  # noqa: E402  (bench/torch_groups.py)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import AllreduceOptions  # noqa: E402

w = MPI.COMM_WORLD
init_groups(w, ringzero=True)
t = torch.zeros(256)
pg = dist.distributed_c10d._get_default_group()
group = pg._get_backend(torch.device("cpu"))  # the RingzeroProcessGroup
opts = AllreduceOptions()
opts.asyncOp = True


def timed(f, k=4000):
    for _ in range(200):
        f()
    w.Barrier()
    t0 = time.perf_counter()
    for _ in range(k):
        f()
    return w.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX) * 1e6


layers = {
    "Communicator.all_reduce(t, out=t, async_op=True).wait()": lambda: group.comm.all_reduce(t, out=t, async_op=True).wait(),
    "the group's allreduce([t], opts).wait()": lambda: group.allreduce([t], opts).wait(),
    "torch's ProcessGroup.allreduce([t], opts).wait()": lambda: pg.allreduce([t], opts).wait(),
    "dist.all_reduce(t, async_op=True).wait()": lambda: dist.all_reduce(t, async_op=True).wait(),
    "dist.all_reduce(t), blocking": lambda: dist.all_reduce(t),
}
for rnd in range(3):
    got = {k: timed(f) for k, f in layers.items()}
    if w.rank == 0:
        print(f"round {rnd}: " + "; ".join(f"{k} {v:.1f} us" for k, v in got.items()), flush=True)
