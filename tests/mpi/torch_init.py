"""The ways into the "ringzero" backend, and the trace through it. Run under mpirun.

In one process, one after the other (destroying the group in between):
1. world_size that disagrees with MPI's: a clear error at once, on every rank;
2. explicit rank and world_size, no MASTER_* in the environment;
3. an explicit store (a TCPStore whose port rank 0 shares over MPI);
4. init_method="tcp://..." with explicit rank and world_size;
5. with COLLECTIVES_TRACE=<argv[1]>: DDP trains 2 steps and the ring's
   traffic lands in the per-rank trace files (checked by the pytest side).
Prints "PASS <case>" / "FAIL <case> ...". Run alone, or from
torch_collectives.py --init TRACE (one launch for both).
"""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
from mpi4py import MPI

import collectives.torch_backend  # noqa: F401

W = MPI.COMM_WORLD
R, N = W.Get_rank(), W.Get_size()
failures: list[str] = []


def result(case: str, ok: bool, detail: str = "") -> None:
    print(f"PASS {case}" if ok else f"FAIL {case} rank {R}: {detail}", flush=True)
    if not ok:
        failures.append(case)


def sum_check(case: str) -> None:
    t = torch.full((3,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    ok = dist.get_backend() == "ringzero" and dist.get_rank() == R and dist.get_world_size() == N
    result(case, ok and torch.equal(t, torch.full((3,), N * (N + 1) / 2)), f"{t.tolist()} {dist.get_backend()}")
    dist.destroy_process_group()


def main(trace: str | None = None) -> list[str]:
    """Cases 1-5 (5 only with a trace path); returns the failed cases' names."""
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        os.environ.pop(var, None)
    # 1. wrong world size
    t0 = time.monotonic()
    try:
        dist.init_process_group(backend="ringzero", world_size=N + 1)
        result("world_size mismatch", False, "no error")
    except ValueError as e:
        result("world_size mismatch", "but MPI's has" in str(e) and "mpirun -n" in str(e) and "store world" in str(e)
               and time.monotonic() - t0 < 10, str(e))

    # 2. explicit rank and world size
    dist.init_process_group(backend="ringzero", rank=R, world_size=N)
    sum_check("explicit rank and world_size")

    # 3. explicit store
    store = None
    if R == 0:
        store = dist.TCPStore("127.0.0.1", 0, N, True, wait_for_workers=False)
    port = W.bcast(store.port if store else None)
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, N, False)
    dist.init_process_group(backend="ringzero", store=store, rank=R, world_size=N)
    sum_check("explicit store")

    # 4. tcp:// init_method
    port = None
    if R == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = W.bcast(port)
    dist.init_process_group(backend="ringzero", init_method=f"tcp://127.0.0.1:{port}", rank=R, world_size=N)
    sum_check("tcp init_method")

    # 5. trace through DDP
    if trace:
        os.environ["COLLECTIVES_TRACE"] = trace
        dist.init_process_group(backend="ringzero")
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(256, 256))  # 257 KiB of gradients: past the small path, on the ring
        for _ in range(2):
            model(torch.randn(4, 256)).sum().backward()
        result("ddp under COLLECTIVES_TRACE", True)
        dist.destroy_process_group()
    if trace:
        os.environ.pop("COLLECTIVES_TRACE")
    return failures


if __name__ == "__main__":
    if main(sys.argv[1] if len(sys.argv) > 1 else None):
        sys.exit(1)
    print(f"OK rank {R}", flush=True)
