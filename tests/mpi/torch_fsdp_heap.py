"""FSDP2 with its communication buffers in the heap trains to the same weights as without.

Run under mpirun (2 or more ranks). The same model (a small MLP, every layer
sharded on its own), data and optimizer are trained twice over one ringzero
group: once as FSDP2 allocates by itself, once with
``set_allocate_memory_from_process_group_for_comm(True)``, which takes the
all-gather and reduce-scatter buffers from the group's heap pool
(torch_backend/heap_pool.py). The weights after every step must be equal:
bit for bit on two ranks; on more, the heap buffers take the direct roads
and the ordinary ones the ring, which add the ranks' gradients in another
order, so within float32 rounding of that order (--close). The pool must
make no heap window after the first step (every later request is a cache
hit) and the same number on every rank. Prints "OK rank r ..." or
"FAIL ..." lines.

    mpirun -n 2 python tests/mpi/torch_fsdp_heap.py
    mpirun -n 4 python tests/mpi/torch_fsdp_heap.py --close
"""
from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import collectives.torch_backend  # noqa: F401  registers "ringzero"

STEPS = 6


def train(heap: bool, group, rank: int):
    """(weights after every step, heap windows the pool had made after the first step)."""
    torch.manual_seed(0)
    # every layer's buffer above plan_cache.SMALL_BYTES (64 KiB), which plans would keep alive
    model = nn.Sequential(nn.Linear(72, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 72))
    mesh = DeviceMesh.from_group(group, "cpu")
    parts = [fully_shard(m, mesh=mesh) for m in model if any(True for _ in m.parameters())]
    root = fully_shard(model, mesh=mesh)
    if heap:
        for m in parts + [root]:
            m.set_allocate_memory_from_process_group_for_comm(True)
    opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if "--close" in sys.argv
           else torch.optim.AdamW(model.parameters(), lr=1e-2))  # AdamW magnifies rounding near zero
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(8, 72, generator=g), torch.randn(8, 72, generator=g)
    weights, first = [], None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        weights.append([p.full_tensor().detach().clone() for p in model.parameters()])
        if step == 0 and heap:
            first = group._pool.made
    return weights, first


def main() -> int:
    dist.init_process_group(backend="ringzero", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    close = "--close" in sys.argv
    plain, _ = train(False, group, rank)
    heap, first = train(True, group, rank)
    pg = group  # the RingzeroProcessGroup itself (its own backend)
    fails = []
    for step, (a, b) in enumerate(zip(plain, heap)):
        for i, (p, q) in enumerate(zip(a, b)):
            if not (torch.allclose(p, q, rtol=1e-6, atol=1e-8) if close else torch.equal(p, q)):
                fails.append(f"FAIL rank {rank}: step {step} parameter {i} differs by "
                             f"{(p - q).abs().max().item():.3g} with heap comm buffers")
    pool = pg._pool
    if pool is None or pool.hits == 0 or pool.made != first:
        fails.append(f"FAIL rank {rank}: the heap pool made windows after the first step, or served "
                     f"nothing from its cache: {first} after step 0, "
                     f"{None if pool is None else (pool.made, pool.hits)} (made, hits) at the end")
    made = [None] * n
    dist.all_gather_object(made, (pool.made, pool.hits) if pool is not None else None)
    if len(set(made)) != 1:
        fails.append(f"FAIL rank {rank}: the ranks' pools differ (made, hits by rank): {made}")
    for f in fails:
        print(f, flush=True)
    if not fails:
        print(f"OK rank {rank} fsdp2-heap {'close' if close else 'equal'} over {STEPS} steps; pool made "
              f"{pool.made} windows (all in the first step), {pool.hits} cache hits", flush=True)
    dist.destroy_process_group()
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
