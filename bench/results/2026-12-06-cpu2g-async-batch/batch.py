"""Async dist.all_reduce calls queued in batches, then waited: time per call.

    mpirun -n 2 python batch.py [--json F]

For each batch size k (1, 4, 16, 64) and each way to wait ("each": wait every
Work in call order; "last": wait only the last, as DDP's reducer waits its
buckets' futures at the end), rounds of 2000/k batches of k async 1 KiB
all-reduces on k different tensors; the time per call is the slowest rank's,
median over rounds. A sync dist.all_reduce on the same tensors is the floor.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.append(os.path.join(os.path.dirname(__file__), "..", ".."))  # after the checkout under test (PYTHONPATH)
from torch_groups import init_groups  # noqa: E402  (bench/torch_groups.py)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--json")
ap.add_argument("--rounds", type=int, default=5)
a = ap.parse_args()
w = MPI.COMM_WORLD
g = init_groups(w, ringzero=True)["ringzero"]
T = [torch.zeros(256) for _ in range(64)]  # zeros stay zeros however often they are summed


def timed(f, k):
    w.Barrier()
    t0 = time.perf_counter()
    for _ in range(k):
        f()
    return w.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX)


def batch(k, last):
    works = [dist.all_reduce(T[i], group=g, async_op=True) for i in range(k)]
    for x in works[-1:] if last else works:
        x.wait()


rows = {}
for rnd in range(a.rounds):
    rows.setdefault("sync", []).append(timed(lambda: [dist.all_reduce(T[i], group=g) for i in range(16)], 125) / 16)
    for k in (1, 4, 16, 64):
        for how in ("each", "last"):
            rows.setdefault(f"{how}-{k}", []).append(timed(lambda: batch(k, how == "last"), max(1, 2000 // k)) / k)
for t in T:  # one last check of the answer: rank + 1 summed over the ranks
    t.fill_(w.rank + 1)
works = [dist.all_reduce(t, group=g, async_op=True) for t in T]
works[-1].wait()
wrong = w.allreduce(sum(int((t != w.size * (w.size + 1) / 2).sum()) for t in T))
if w.rank == 0:
    out = {k: float(np.median(v)) * 1e6 for k, v in rows.items()}
    print(" ".join(f"{k} {v:.1f}" for k, v in out.items()), f"#wrong {wrong}", flush=True)
    if a.json:
        json.dump({"us_per_call": out, "wrong": wrong, "rounds_us": {k: [x * 1e6 for x in v] for k, v in rows.items()}},
                  open(a.json, "w"), indent=1)
g = None
