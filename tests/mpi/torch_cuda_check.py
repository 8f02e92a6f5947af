"""CUDA tensors through the "ringzero" backend (GPU only; 2+ ranks may share one GPU).

    mpirun -n 2 python tests/mpi/torch_cuda_check.py
    mpirun -n 2 python tests/mpi/torch_cuda_check.py --cpu   # the same checks on CPU tensors (tests the script)

Prints one "PASS <check>" or "FAIL <check>: <why>" line per check on each
rank, then "OK rank r" if all passed; exits 1 on any FAIL (an exception in a
check is a FAIL with its message, and the next check still runs while the
backend is usable). Expected values are computed on the CPU with torch from
every rank's deterministic integer-valued input, so they are exact.
"""
from __future__ import annotations

import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import collectives.torch_backend  # noqa: F401  registers "ringzero"

dist.init_process_group(backend="ringzero", timeout=timedelta(seconds=120))
R, N = dist.get_rank(), dist.get_world_size()
if "--cpu" in sys.argv:
    DEV = torch.device("cpu")
else:
    torch.cuda.set_device(R % torch.cuda.device_count())
    DEV = torch.device("cuda", torch.cuda.current_device())
failed: list[str] = []


def inp(rank, n, dtype, salt=0):
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 7 + rank * 13 + salt) % 9) - 4).to(dtype)


def check(name):
    def deco(fn):
        try:
            got, want = fn()
            got = got.cpu()
            if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
                diff = (got.double() - want.double()).abs()
                raise AssertionError(f"{got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}; "
                                     f"max |diff| {float(diff.max()) if diff.numel() else 0}; "
                                     f"got {got.reshape(-1)[:5].tolist()} want {want.reshape(-1)[:5].tolist()}")
            print(f"PASS {name} (rank {R})", flush=True)
        except Exception as e:  # noqa: BLE001  every failure becomes a FAIL line
            failed.append(name)
            print(f"FAIL {name} (rank {R}): {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
        return fn
    return deco


for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32):
    for n in (0, 1, 1031, (1 << 20) + 5):  # over 1 MiB in every dtype: the ring, several chunks
        @check(f"all_reduce sum {dtype} n={n}")
        def _():
            t = inp(R, n, dtype).to(DEV)
            dist.all_reduce(t)
            return t, sum(inp(r, n, torch.float64) for r in range(N)).to(dtype)

    @check(f"all_reduce max/min {dtype}")
    def _():
        a, b = inp(R, 999, dtype).to(DEV), inp(R, 999, dtype).to(DEV)
        dist.all_reduce(a, op=dist.ReduceOp.MAX)
        dist.all_reduce(b, op=dist.ReduceOp.MIN)
        ref = torch.stack([inp(r, 999, torch.float64) for r in range(N)])
        return torch.cat([a, b]), torch.cat([ref.max(0).values, ref.min(0).values]).to(dtype)

    @check(f"reduce_scatter_tensor avg {dtype}")
    def _():
        x = (inp(R, 1000 * N, dtype) * N).to(DEV)
        out = torch.empty(1000, dtype=dtype, device=DEV)
        dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.AVG)
        return out, sum(inp(r, 1000 * N, torch.float64) for r in range(N))[R * 1000:(R + 1) * 1000].to(dtype)

    @check(f"all_gather_into_tensor {dtype}")
    def _():
        out = torch.empty(777 * N, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(out, inp(R, 777, dtype).to(DEV))
        return out, torch.cat([inp(r, 777, dtype) for r in range(N)])

    @check(f"broadcast strided {dtype}")
    def _():
        base = torch.zeros(500, 2, dtype=dtype, device=DEV)
        base[:, 0] = inp(R, 500, dtype).to(DEV)
        t = base[:, 0]
        dist.broadcast(t, src=N - 1)
        return t, inp(N - 1, 500, dtype)

for dtype in (torch.float32, torch.bfloat16):
    @check(f"all_reduce premul_sum 0.5 {dtype}")
    def _():
        t = inp(R, 4099, dtype).to(DEV)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        return t, (sum(inp(r, 4099, torch.float64) for r in range(N)) * 0.5).to(dtype)


@check("list all_gather and all_to_all_single")
def _():
    outs = [torch.empty(33, device=DEV) for _ in range(N)]
    dist.all_gather(outs, inp(R, 33, torch.float32).to(DEV))
    a2a = torch.empty(4 * N, device=DEV)
    dist.all_to_all_single(a2a, (torch.arange(4.0 * N) + 100 * R).to(DEV))
    want_a2a = torch.cat([torch.arange(4.0 * R, 4.0 * R + 4) + 100 * r for r in range(N)])
    return torch.cat(outs + [a2a]), torch.cat([inp(r, 33, torch.float32) for r in range(N)] + [want_a2a])


@check("side stream: the collective waits for torch's current stream, and the stream for it")
def _():
    if DEV.type == "cpu":
        return torch.ones(1), torch.ones(1)  # nothing to order on the CPU
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        m = torch.randn(2048, 2048, device=DEV)
        for _ in range(20):  # keep the stream busy so an unordered read would see stale data
            m = m @ m / 2048
        t = torch.zeros(1 << 20, device=DEV) + (R + 1) + 0 * m[0, 0]
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        t2 = t * 2  # on the side stream, after the collective
    torch.cuda.synchronize()
    return t2, torch.full((1 << 20,), float(N * (N + 1)))


def _train(model, rows):
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(5, 16, 12, generator=gen, dtype=torch.float64), torch.randn(5, 16, 3, generator=gen,
                                                                                  dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in range(5):
        opt.zero_grad()
        nn.functional.mse_loss(model(x[s, rows].to(DEV)), y[s, rows].to(DEV)).backward()
        opt.step()


def _model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 7), nn.Tanh(), nn.Linear(7, 3)).double().to(DEV)


def _close(got, ref):
    ok = all(torch.allclose(g.cpu(), w.cpu(), rtol=1e-6, atol=1e-9) for g, w in zip(got, ref))
    return torch.tensor([ok]), torch.tensor([True])


@check("DDP on CUDA matches one-process training")
def _():
    from torch.nn.parallel import DistributedDataParallel as DDP
    ref = _model()
    _train(ref, slice(None))
    model = DDP(_model(), device_ids=[DEV.index] if DEV.type == "cuda" else None)
    per = 16 // N
    _train(model, slice(R * per, (R + 1) * per))
    return _close([p.detach() for p in model.module.parameters()], [p.detach() for p in ref.parameters()])


@check("FSDP2 on CUDA matches one-process training")
def _():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    ref = _model()
    _train(ref, slice(None))
    model = _model()
    mesh = init_device_mesh(DEV.type, (N,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    per = 16 // N
    _train(model, slice(R * per, (R + 1) * per))
    return _close([p.full_tensor().detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])


print(f"{'FAIL' if failed else 'OK'} rank {R}: {len(failed)} failed" + (f": {failed}" if failed else ""), flush=True)
dist.destroy_process_group()
sys.exit(1 if failed else 0)
