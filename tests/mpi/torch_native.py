"""Run under mpirun: the group's C++ calls (collectives/torch_backend/native.py, csrc/torch_lane.cpp).

Blocking dist.all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
broadcast, repeated on the same tensors, on fresh views and on new tensors,
in several dtypes and ops: exact against numpy, and every repeat run by the
lane (its run count grows by one a call) once the first call wrote the
program. Calls the lane does not take (PREMUL_SUM, async, non-contiguous)
stay exact through the Python methods. Last, a call one rank does not make
raises torch's DistBackendError, saying "Timed out", on the rank that made it.

    mpirun -n 2 python tests/mpi/torch_native.py [--off]

``--off``: run with COLLECTIVES_TORCH_LANE=0 (set by the caller) and check the group
says so. Prints "OK rank r checks k native N" or FAIL lines; exits 1 on a failure.
"""
from __future__ import annotations

import sys
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import collectives.torch_backend  # noqa: F401  registers "ringzero"

dist.init_process_group(backend="ringzero", timeout=timedelta(seconds=20))
R, N = dist.get_rank(), dist.get_world_size()
RS = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # torch 2.13's names
AG = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
group = dist.group.WORLD
pg = group if hasattr(group, "comm") else group._get_backend(torch.device("cpu"))
failures: list[str] = []
checks = 0
OFF = "--off" in sys.argv


def check(label, got, want):
    global checks
    checks += 1
    g = got.to(torch.float64).numpy()
    if g.shape != want.shape or not np.array_equal(g, want):
        failures.append(f"FAIL {label}: got {g.reshape(-1)[:6]} want {want.reshape(-1)[:6]}")


def runs() -> int:
    lane = pg.comm.lane
    return lane.stats()["runs"] if lane is not None else 0


def values(q, count, call):
    return (((np.arange(count) * 7 + q * 13 + call * 3) % 9) - 4).astype(np.float64)


def in_lane(label, before, calls):
    """The lane ran every one of ``calls`` calls (the C++ call took them), unless --off."""
    got = runs() - before
    if not OFF and got != calls:
        failures.append(f"FAIL {label}: the lane ran {got} of {calls} calls")


OPS = {"sum": (dist.ReduceOp.SUM, lambda s: s.sum(0)), "max": (dist.ReduceOp.MAX, lambda s: s.max(0)),
       "avg": (dist.ReduceOp.AVG, lambda s: s.sum(0) / N)}
for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
    for count in (256 * N, 4096 * N):
        piece = count // N
        for opname, (op, fold) in OPS.items():
            if opname == "avg" and not dtype.is_floating_point:
                continue
            scale = N if opname == "avg" else 1  # sums divisible by N: the average is exact
            t, rs_out, ag_out = torch.empty(count, dtype=dtype), torch.empty(piece, dtype=dtype), \
                torch.empty(count, dtype=dtype)
            for how in ("same", "fresh", "same"):
                for call in range(4):
                    xs = np.stack([values(q, count, call) * scale for q in range(N)])
                    t.copy_(torch.from_numpy(xs[R]))
                    arg = t[:] if how == "fresh" else t
                    dist.all_reduce(arg, op=op)
                    check(f"all_reduce {dtype} {count} {opname} {how} #{call}", t, fold(xs))
                    src = torch.from_numpy(xs[R]).to(dtype)
                    RS(rs_out[:] if how == "fresh" else rs_out, src, op=op)
                    check(f"reduce_scatter {dtype} {count} {opname} {how} #{call}", rs_out,
                          fold(xs)[R * piece:(R + 1) * piece])
                    if opname == "sum":
                        mine = torch.from_numpy(xs[R][:piece]).to(dtype)
                        AG(ag_out[:] if how == "fresh" else ag_out, mine)
                        check(f"all_gather {dtype} {count} {how} #{call}", ag_out,
                              np.concatenate([xs[q][:piece] for q in range(N)]))
                        t.copy_(torch.from_numpy(xs[R]))
                        dist.broadcast(t[:] if how == "fresh" else t, src=1 % N)
                        check(f"broadcast {dtype} {count} {how} #{call}", t, xs[1 % N])

# the lane's share, measured on one shape: every repeat after the first two in C++


def repeated(label, call, calls_each=1, k=10):
    """``call`` twice (the Python path writes the program), then k times: all k in the lane."""
    call()
    call()
    before = runs()
    for _ in range(k):
        call()
    in_lane(label, before, k * calls_each)


t = torch.ones(1024)
repeated("repeated all_reduce, same and fresh views", lambda: (dist.all_reduce(t), dist.all_reduce(t[:])), 2)
src, out = torch.ones(1024 * N), torch.empty(1024)
repeated("repeated reduce_scatter_tensor", lambda: RS(out, src))
check("reduce_scatter ones", out, np.full(1024, float(N)))
mine, gathered = torch.full((1024,), float(R)), torch.empty(1024 * N)
repeated("repeated all_gather_into_tensor", lambda: AG(gathered, mine))
check("all_gather ranks", gathered, np.repeat(np.arange(N, dtype=np.float64), 1024))
b = torch.full((1024,), float(R))
repeated("repeated broadcast", lambda: (b.fill_(float(R)), dist.broadcast(b, src=0)))
check("broadcast root 0", b, np.zeros(1024))

# what the lane does not take: exact through the Python methods
t = torch.full((1024,), float(R + 1))
dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0) if hasattr(dist, "_make_nccl_premul_sum") else dist.ReduceOp.SUM)
want = np.full(1024, 2.0 * sum(range(1, N + 1)) if hasattr(dist, "_make_nccl_premul_sum") else sum(range(1, N + 1)))
check("premul_sum", t, want)
t = torch.full((1024,), float(R + 1))
w = dist.all_reduce(t, async_op=True)
w.wait()
check("async all_reduce", t, np.full(1024, float(sum(range(1, N + 1)))))
s = torch.full((2048,), -1.0)
s[::2] = float(R + 1)
dist.all_reduce(s[::2])
check("strided all_reduce", s[::2].contiguous(), np.full(1024, float(sum(range(1, N + 1)))))
check("strided all_reduce, gaps untouched", s[1::2].contiguous(), np.full(1024, -1.0))

if OFF and getattr(pg, "native", None):
    failures.append("FAIL COLLECTIVES_TORCH_LANE=0 and the group installed the C++ calls")
if not OFF and not getattr(pg, "native", None):
    failures.append("FAIL the C++ calls are not installed (python -m collectives.torch_backend.build builds them)")

def verdict(extra=""):
    for f in failures:
        print(f"rank {R}: {f}", flush=True)
    if not failures:
        print(f"OK rank {R} checks {checks} native {getattr(pg, 'native', None)}{extra}", flush=True)


# a call rank 1 does not make: rank 0 times out in torch's terms, through the C++ call
dist.barrier()
if R == 0 and N > 1:
    pg.comm.timeout = 2.0
    t = torch.ones(1024)  # the shape of the repeated all-reduce above: the lane takes it
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        failures.append("FAIL an all_reduce that rank 1 never made returned")
    except dist.DistBackendError as e:
        if "Timed out" not in str(e):
            failures.append(f"FAIL the timeout says {str(e)[:200]!r}")
        took = time.monotonic() - t0
        if took > 10:
            failures.append(f"FAIL the 2 s timeout took {took:.1f} s")
    verdict(" timeout raised")
else:
    verdict()
    time.sleep(5)  # never joins rank 0's call; stays until it has timed out
dist.destroy_process_group()
sys.exit(1 if failures else 0)
