"""FSDP2 (ZeRO-3) training in plain PyTorch, over the "ringzero" backend, under any launcher.

    torchrun --nproc-per-node 2 examples/train_torch.py          # any number of ranks
    torchrun --nproc-per-node 4 examples/train_torch.py --hsdp   # 2 x 2 mesh: replicate x shard
    mpirun -n 2 python examples/train_torch.py                   # the same under MPI
    python examples/train_torch.py --spawn 2                     # torch.multiprocessing.spawn

The only ringzero-specific line is the import that registers the backend;
``init_process_group(backend="ringzero")`` takes rank and world size from
the launcher (under torchrun and mp.spawn the ranks meet over torch's store,
under mpirun over MPI). Every rank trains an MLP on its slice of each batch;
at the end the loss is printed, and the run checks that every rank holds the
same weights.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import collectives.torch_backend  # noqa: E402,F401  registers "ringzero"


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64, help="global batch (split over the data-parallel ranks)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--hsdp", action="store_true", help="2-D mesh: replicate over pairs, shard within (even ranks)")
    ap.add_argument("--no-reshard", action="store_true", help="keep gathered weights after forward (ZeRO-2)")
    ap.add_argument("--spawn", type=int, default=0, metavar="N",
                    help="start N ranks with torch.multiprocessing.spawn instead of a launcher")
    return ap.parse_args()


def spawned(rank: int, world: int, port: int, args) -> None:
    """One rank that torch.multiprocessing.spawn started: rank and size are given, the store is rank 0's."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend="ringzero", rank=rank, world_size=world)
    if train(args):
        sys.exit(1)


def main() -> int:
    args = parse()
    if args.spawn:
        import socket

        import torch.multiprocessing as mp
        with socket.socket() as s:  # a free port for rank 0's store
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            mp.spawn(spawned, args=(args.spawn, port, args), nprocs=args.spawn)
        except mp.ProcessExitedException as e:
            print(f"a rank failed: {e}", flush=True)
            return 1
        return 0
    dist.init_process_group(backend="ringzero")
    return train(args)


def train(args) -> int:
    """Train on the initialised default group; 0 when every rank ends with the same weights."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.hsdp:
        if world % 2:
            raise SystemExit(f"--hsdp needs an even number of ranks, got {world}")
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))

    torch.manual_seed(0)  # same initial weights on every rank
    dims = [32] + [args.hidden] * args.layers
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(dims[-1], 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=not args.no_reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=not args.no_reshard)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    gen = torch.Generator().manual_seed(1)  # the same data stream on every rank; each takes its slice
    w_true = torch.randn(32, 1, generator=gen)
    per = max(1, args.batch // world)
    lo = rank * per
    t0 = time.perf_counter()
    for step in range(args.steps):
        x = torch.randn(per * world, 32, generator=gen)
        y = torch.tanh(x @ w_true)
        loss = nn.functional.mse_loss(model(x[lo:lo + per]), y[lo:lo + per])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {total.item():.5f}", flush=True)
    elapsed = time.perf_counter() - t0

    full = torch.cat([p.full_tensor().reshape(-1) for p in model.parameters()])
    checks = torch.stack([full.sum(), full.abs().sum()])
    ref = checks.clone()
    dist.broadcast(ref, src=0)
    same = torch.equal(checks, ref)
    if rank == 0:
        print(f"{world} ranks, {full.numel()} parameters, {args.steps} steps in {elapsed:.2f} s; "
              f"weights identical on every rank: {same}", flush=True)
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
