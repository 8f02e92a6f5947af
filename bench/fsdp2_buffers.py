"""FSDP2's two collectives on its own buffer shapes: buffers from the group's heap pool
(``allocate_tensor``, what ``set_allocate_memory_from_process_group_for_comm`` asks for)
against ordinary tensors, over ringzero.

    mpirun -n 2 python bench/fsdp2_buffers.py --sizes 4M,16M --iters 12

Each iteration makes fresh buffers as FSDP2 does (the pool hands back the blocks
of the previous iteration), then times an in-place ``all_gather_into_tensor``
(the input is the rank's own slice of the output) and a ``reduce_scatter_tensor``
of a buffer into a fresh output; every result is checked. Prints the median
time per size and kind, the road the last call took and the pool's windows
made and cache hits.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import collectives.torch_backend  # noqa: E402,F401  registers "ringzero"


def size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(s[:-1] if s[-1].isalpha() else s) * mult


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1M,4M,16M", help="comma list of buffer sizes in bytes (float32)")
    p.add_argument("--iters", type=int, default=12)
    a = p.parse_args()
    dist.init_process_group("ringzero")
    pg, n, r = dist.group.WORLD, dist.get_world_size(), dist.get_rank()
    if r == 0:
        print(f"# FSDP2's collectives on heap-pool buffers vs ordinary tensors, {n} ranks, float32, "
              f"median of {a.iters}")
        print(f"{'bytes':>10} {'buffers':>8} {'all_gather(ms)':>15} {'reduce_scatter(ms)':>19} {'road':>12} "
              f"{'pool made/hits':>15}")
    for nbytes in [size(s) for s in a.sizes.split(",")]:
        numel = nbytes // 4 // n * n
        for heap in (False, True):
            times = {"ag": [], "rs": []}
            for _ in range(a.iters):
                out = pg.allocate_tensor(numel, dtype=torch.float32, device="cpu") if heap else torch.empty(numel)
                own = out.narrow(0, numel // n * r, numel // n)
                own.fill_(r + 1)
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_gather_into_tensor(out, own)
                times["ag"].append(time.perf_counter() - t0)
                assert torch.equal(out.view(n, -1)[:, 0], torch.arange(1, n + 1, dtype=torch.float32))
                x = pg.allocate_tensor(numel, dtype=torch.float32, device="cpu") if heap else torch.empty(numel)
                x.fill_(r + 1)
                o = x.new_empty(numel // n)
                dist.barrier()
                t0 = time.perf_counter()
                dist.reduce_scatter_tensor(o, x)
                times["rs"].append(time.perf_counter() - t0)
                assert torch.all(o == n * (n + 1) / 2)
                road = pg.comm.road_taken().value
                del out, own, x, o
            if r == 0:
                med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}
                pool = f"{pg._pool.made}/{pg._pool.hits}" if heap else "-"
                print(f"{numel * 4:>10} {'heap' if heap else 'ordinary':>8} {med['ag']:>15.2f} {med['rs']:>19.2f} "
                      f"{road:>12} {pool:>15}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
