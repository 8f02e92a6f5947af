"""DDP, FSDP2, HSDP and ZeroRedundancyOptimizer over "ringzero" match one-process training.

Run under mpirun, alone or from torch_collectives.py --train (HSDP needs 4 ranks; it is skipped, and says so, at other
sizes). Each rank trains a float64 MLP for 5 steps on its slice of a fixed
batch; the reference trains the same model on the whole batch in one
process (every rank computes it locally, no communication). Parameters must
agree within 1e-6 relative, with SGD + momentum and with AdamW. One layer
has 7 output rows, which no world size here divides: FSDP2 shards it unevenly.
Prints "PASS <case>" or "FAIL <case> ..." per case and "OK rank r" at the end.
"""
from __future__ import annotations

import copy
import sys

import torch
import torch.distributed as dist
from torch import nn

import collectives.torch_backend  # noqa: F401  registers "ringzero"

STEPS, BATCH, RTOL = 5, 24, 1e-6
torch.manual_seed(0)
DATA = torch.randn(STEPS, BATCH, 12, dtype=torch.float64)
TARGET = torch.randn(STEPS, BATCH, 3, dtype=torch.float64)
OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1),
}
failures: list[str] = []


def make_model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 7), nn.Tanh(), nn.Linear(7, 3)).double()


def train(model, opt, rows):
    for step in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(DATA[step, rows]), TARGET[step, rows])
        loss.backward()
        opt.step()


def reference(opt_name):
    model = make_model()
    train(model, OPTIMIZERS[opt_name](model.parameters()), slice(None))
    return [p.detach() for p in model.parameters()]


def compare(case, got, want):
    worst = max(float(((g - w).abs() / w.abs().clamp_min(1e-3)).max()) for g, w in zip(got, want))
    moved = max(float((w - p).abs().max()) for w, p in zip(want, make_model().parameters()))
    if worst <= RTOL and moved > 1e-3:
        print(f"PASS {case} (worst relative difference {worst:.2e})", flush=True)
    else:
        failures.append(f"FAIL {case} rank {R}: worst relative difference {worst:.2e} (moved {moved:.2e})")


def my_rows(world: int, index: int) -> slice:
    per = BATCH // world
    return slice(index * per, (index + 1) * per)


def run_ddp(opt_name):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(make_model())
    train(model, OPTIMIZERS[opt_name](model.parameters()), my_rows(N, R))
    return [p.detach() for p in model.module.parameters()]


def run_zero1(opt_name):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(make_model())
    cls = torch.optim.SGD if opt_name == "sgd" else torch.optim.AdamW
    kw = dict(lr=0.1, momentum=0.9) if opt_name == "sgd" else dict(lr=0.01, weight_decay=0.1)
    train(model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, **kw), my_rows(N, R))
    return [p.detach() for p in model.module.parameters()]


def run_fsdp(opt_name, mesh, rows, reshard=True):
    from torch.distributed.fsdp import fully_shard
    model = make_model()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    train(model, OPTIMIZERS[opt_name](model.parameters()), rows)
    return [p.full_tensor().detach() for p in model.parameters()]


def main() -> int:
    """Every case over the initialised default group; 0 when all passed."""
    global R, N
    from torch.distributed.device_mesh import init_device_mesh
    R, N = dist.get_rank(), dist.get_world_size()
    mesh1 = init_device_mesh("cpu", (N,))
    mesh2 = init_device_mesh("cpu", (2, N // 2), mesh_dim_names=("replicate", "shard")) if N == 4 else None
    for opt_name in OPTIMIZERS:
        want = reference(opt_name)
        cases = {
            "ddp": lambda: run_ddp(opt_name),
            "zero1": lambda: run_zero1(opt_name),
            "fsdp2": lambda: run_fsdp(opt_name, mesh1, my_rows(N, R)),
            "fsdp2-zero2": lambda: run_fsdp(opt_name, mesh1, my_rows(N, R), reshard=False),
        }
        if mesh2 is not None:
            cases["hsdp"] = lambda: run_fsdp(opt_name, mesh2, my_rows(N, R))
        elif R == 0:
            print(f"SKIP hsdp {opt_name}: needs 4 ranks for a 2x2 mesh, have {N}", flush=True)
        for name, fn in cases.items():
            compare(f"{name} {opt_name}", fn(), want)
    for f in failures:
        print(f, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    dist.init_process_group(backend="ringzero")
    code = main()
    if not code:
        print(f"OK rank {R}", flush=True)
    dist.destroy_process_group()
    sys.exit(code)
