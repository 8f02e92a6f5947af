"""Run under mpirun with COLLECTIVES_STAGE=0: torch tensors in the symmetric heap
(collectives.torch_backend.alloc, Communicator.alloc with a torch dtype) through
the ringzero process group take the direct path, exact against numpy; a group
that is not ringzero is refused by name. Prints one JSON line per rank.
"""
import json
import os
import sys

import collectives.torch_backend as rz  # registers "ringzero" (and imports collectives before mpi4py.MPI)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from collectives.teach.trace import Tracer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inputs import data  # noqa: E402  (tests/inputs.py)

dist.init_process_group("ringzero")
rank, n = dist.get_rank(), dist.get_world_size()
pg = dist.group.WORLD
failures, cases, paths = [], 0, set()


def check(label, got, want):
    global cases
    cases += 1
    g = got.float().numpy() if got.dtype == torch.bfloat16 else got.numpy()
    if g.shape != want.shape or not np.array_equal(g.astype(np.float64), want.astype(np.float64)):
        failures.append(f"{label}: got {g.reshape(-1)[:4]} want {want.reshape(-1)[:4]}")


def traced(fn):
    """Run fn with a tracer on the group's Communicator; the data phases it recorded."""
    comm = pg.comm
    comm.tracer = t = Tracer()
    try:
        fn()
    finally:
        comm.tracer = None
    return {str(e.get("phase")) for e in t.data_events()}


count = 24 * n + 6  # every rank's piece of an all-gather: 24 + ...; reduce-scatter: divisible by n
count -= count % n
for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64):
    xs = [torch.from_numpy(data(count, q, np.float64)).to(dtype) for q in range(n)]
    total = sum(x.double() for x in xs).numpy()
    x = rz.alloc((count,), dtype)
    out = pg.comm.alloc((count,), dtype)  # the Communicator's own alloc, with a torch dtype
    piece = rz.alloc((count // n,), dtype)
    def one_round(call):
        x.copy_(xs[rank])
        dist.all_reduce(x)
        check(f"all_reduce {dtype} #{call}", x, total)
        x.copy_(xs[rank])
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        check(f"all_reduce max {dtype} #{call}", x, np.max([v.double().numpy() for v in xs], axis=0))
        x.copy_(xs[rank])
        dist.reduce_scatter_tensor(piece, x)
        check(f"reduce_scatter {dtype} #{call}", piece, total[rank * (count // n):(rank + 1) * (count // n)])
        piece.copy_(xs[rank][:count // n])
        dist.all_gather_into_tensor(out, piece)
        check(f"all_gather {dtype} #{call}", out, np.concatenate([v[:count // n].double().numpy() for v in xs]))
        x.copy_(xs[rank])
        dist.broadcast(x, src=n - 1)
        check(f"broadcast {dtype} #{call}", x, xs[n - 1].double().numpy())

    paths |= traced(lambda: one_round(0))  # every data phase of the first round
    for call in (1, 2):  # repeated: the C programs take these
        one_round(call)
heap = pg.comm.symmetric.heap
located = heap.locate(x.numpy()) is not None and heap.locate(torch.zeros(4).numpy()) is None
try:
    rz.alloc((4,), group=object())
    refused = ""
except TypeError as e:
    refused = str(e)
dist.destroy_process_group()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures[:10], "nfail": len(failures),
                  "paths": sorted(paths), "located": located, "refused": refused}), flush=True)
