"""dist.all_reduce on heap tensors (collectives.torch_backend.alloc) against the same
call on ordinary tensors, over ringzero and over Gloo, in one launch (ratios only).

  mpirun -n 2 python bench/torch_heap.py [--sizes 1M,16M,64M] [--rounds 5]

What a DDP or FSDP user gets from putting a bucket in the heap: the in-place
all-reduce reads the peers' tensors directly and each rank writes its reduced
segment into every rank's tensor (docs/symmetric.md, the push). Every result
is checked against the sum computed here; prints one line per size on rank 0.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # bench/ helpers; the repository goes before it, so that
sys.path.insert(0, os.path.join(HERE, ".."))  # "collectives" is the package, not bench/collectives.py

import collectives  # noqa: E402,F401  (before mpi4py starts MPI: see collectives/__init__)
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from torch_groups import init_groups  # noqa: E402  (bench/torch_groups.py)


def size_arg(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1M,16M,64M", help="comma list of bytes (K, M suffixes), float32")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds, variants taking turns; median reported")
    a = p.parse_args()
    world = MPI.COMM_WORLD
    import torch
    import torch.distributed as dist

    from collectives.torch_backend import alloc

    groups = init_groups(world, ringzero=True)
    rz, gloo = groups["ringzero"], groups["gloo"]
    n, rank = world.size, world.rank
    bad = 0
    if rank == 0:
        print(f"# {n} ranks, float32 sum, dist.all_reduce in place; busbw = algbw x 2(n-1)/n; median of "
              f"{a.rounds} rounds", flush=True)
        print(f"{'size(B)':>10} {'heap us':>10} {'ordinary us':>12} {'gloo us':>10} {'heap busbw':>11} "
              f"{'heap/ordinary':>14} {'heap/gloo':>10} {'ordinary/gloo':>14}", flush=True)
    for nbytes in (size_arg(s) for s in a.sizes.split(",")):
        count = nbytes // 4
        heap = alloc((count,), torch.float32)
        plain = torch.empty(count, dtype=torch.float32)
        cases = {"heap": (heap, rz), "ordinary": (plain, rz), "gloo": (plain, gloo)}
        iters = max(2, min(50, (64 << 20) // max(nbytes, 1)))
        times = {k: [] for k in cases}
        for _ in range(a.rounds):
            for k, (t, g) in cases.items():
                t.fill_(rank + 1)
                dist.all_reduce(t, group=g)  # checked, and the warm-up of this round
                bad += int((t != n * (n + 1) / 2).sum())
                world.Barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(t, group=g)
                times[k].append((time.perf_counter() - start) / iters)
        if rank == 0:
            med = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
            busbw = nbytes / med["heap"] / 1e3 * 2 * (n - 1) / n
            print(f"{nbytes:>10} {med['heap']:>10.1f} {med['ordinary']:>12.1f} {med['gloo']:>10.1f} "
                  f"{busbw:>9.2f}GB/s {med['ordinary'] / med['heap']:>13.2f}x {med['gloo'] / med['heap']:>9.2f}x "
                  f"{med['gloo'] / med['ordinary']:>13.2f}x", flush=True)
    bad = world.allreduce(bad)
    if rank == 0:
        print(f"# wrong values: {bad} {'OK' if bad == 0 else 'FAILED'}", flush=True)
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
