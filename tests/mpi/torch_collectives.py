"""Every dist.* collective over the "ringzero" backend, checked exactly against numpy.

Run under mpirun (any world size). Every rank builds every rank's input from
a deterministic integer formula, so each rank computes the exact answer with
numpy (float64, then cast: integer values make every sum and product exact
in every dtype used here). Prints one "FAIL ..." line per wrong result and,
at the end, "OK rank r checks k" when all passed; exits 1 on any failure.

Last, a mismatched all-reduce (rank 0 sends a different size) must raise on
every rank, naming the ranks, well within the init timeout.

To save launches (importing torch costs seconds per rank), the same process
can also run, first, torch_init.py's cases (``--init TRACE``) and, before the
mismatch, torch_train.py's training comparisons (``--train``).

    mpirun -n 4 python tests/mpi/torch_collectives.py [--init TRACE_PATH] [--train]
"""
from __future__ import annotations

import sys
import time
from datetime import timedelta

T_START = time.monotonic()

import numpy as np
import torch
import torch.distributed as dist

import collectives.torch_backend  # noqa: F401  registers "ringzero"

T0 = time.monotonic()
failures: list[str] = []
if "--init" in sys.argv:
    import torch_init  # this script's folder is on sys.path
    failures += [f"FAIL init case {c}" for c in torch_init.main(sys.argv[sys.argv.index("--init") + 1])]

TIMEOUT_S = 30
dist.init_process_group(backend="ringzero", timeout=timedelta(seconds=TIMEOUT_S))
R, N = dist.get_rank(), dist.get_world_size()
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64]
FLOATS = {torch.float32, torch.float64, torch.bfloat16, torch.float16}
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}
SIZES = [0, 1, 7, 1031]
checks = 0
pending: list = []  # (work, tensor, expected, label): async calls checked after their wait


def big(dtype) -> int:
    return (1 << 20) // torch.empty(0, dtype=dtype).element_size() + 3  # just over 1 MiB


def values(rank: int, count: int, salt: int, op: str = "sum") -> np.ndarray:
    """Rank ``rank``'s integer-valued input (float64), small enough to stay exact."""
    i = np.arange(count, dtype=np.int64)
    if op == "prod":
        return (((i * 3 + rank * 5 + salt) % 5) - 2).astype(np.float64)  # |product| <= 2^N
    v = (((i * 7 + rank * 13 + salt * 5) % 9) - 4).astype(np.float64)
    return v * N if op == "avg" else v  # sums divisible by N: the average is exact


def tensor(a: np.ndarray, dtype, strided: bool = False) -> torch.Tensor:
    t = torch.from_numpy(a).to(dtype)
    if strided:  # every other element of a bigger buffer: not contiguous
        s = torch.full((t.numel(), 2), -99, dtype=dtype)
        s[:, 0] = t
        return s[:, 0]
    return t


def reduce(arrays, op: str, factor: float | None = None) -> np.ndarray:
    if factor is not None:
        arrays = [a * factor for a in arrays]
    stack = np.stack(arrays)
    if op in ("sum", "premul"):
        return stack.sum(0)
    if op == "avg":
        return stack.sum(0) / N
    return {"max": stack.max, "min": stack.min, "prod": stack.prod}[op](0)


def check(got: torch.Tensor, want: np.ndarray, label: str) -> None:
    global checks
    checks += 1
    exp = torch.from_numpy(np.ascontiguousarray(want)).to(got.dtype).reshape(got.shape)
    if not torch.equal(got, exp):
        bad = (got != exp).nonzero()
        first = bad[0].tolist() if len(bad) else "shape"
        failures.append(f"FAIL rank {R} {label}: {len(bad)} wrong, first at {first}: "
                        f"got {got.reshape(-1)[:6].tolist()} want {exp.reshape(-1)[:6].tolist()}")


def run(call, result, want, label, async_op):
    """Run ``call(async_op)``; check now, or after the wait when async."""
    work = call(async_op)
    if async_op:
        pending.append((work, result, want, label))
        if len(pending) >= 8:
            flush()
    else:
        check(result, want, label)


def flush() -> None:
    while pending:
        work, result, want, label = pending.pop(0)
        work.wait()
        check(result, want, label)


def op_cases(dtype):
    for name, op in OPS.items():
        yield name, op, None
    if dtype in FLOATS:
        yield "premul", dist._make_nccl_premul_sum(0.5), 0.5


k = 0
for dtype in DTYPES:
    for op_name, op, factor in op_cases(dtype):
        base = "sum" if op_name == "premul" else op_name
        for count in SIZES + ([big(dtype)] if op_name == "sum" else []):
            k += 1
            strided, async_op = k % 3 == 0, k % 2 == 0
            lbl = f"{dtype} {op_name} n={count} strided={strided} async={async_op}"
            # all_reduce
            ins = [values(r, count, k, base) for r in range(N)]
            t = tensor(ins[R], dtype, strided)
            run(lambda a: dist.all_reduce(t, op=op, async_op=a), t, reduce(ins, op_name, factor),
                "all_reduce " + lbl, async_op)
            # reduce_scatter_tensor: count elements per rank
            ins = [values(r, count * N, k + 1, base) for r in range(N)]
            out = torch.empty(count, dtype=dtype)
            x = tensor(ins[R], dtype)
            want = reduce(ins, op_name, factor)[R * count:(R + 1) * count]
            run(lambda a: dist.reduce_scatter_tensor(out, x, op=op, async_op=a), out, want,
                "reduce_scatter_tensor " + lbl, async_op)
    for count in SIZES + [big(dtype)]:
        k += 1
        strided, async_op = k % 3 == 0, k % 2 == 1
        lbl = f"{dtype} n={count} strided={strided} async={async_op}"
        ins = [values(r, count, k) for r in range(N)]
        out = torch.empty(count * N, dtype=dtype)
        x = tensor(ins[R], dtype, strided)
        run(lambda a: dist.all_gather_into_tensor(out, x, async_op=a), out, np.concatenate(ins),
            "all_gather_into_tensor " + lbl, async_op)
        if count == big(dtype):  # over 1 MiB: the two ring paths above are enough
            b = tensor(ins[R], dtype, strided)
            run(lambda a: dist.broadcast(b, src=N - 1, async_op=a), b, ins[N - 1], "broadcast " + lbl, async_op)
            continue
        outs = [tensor(np.zeros(count), dtype, strided) for _ in range(N)]
        work = dist.all_gather(outs, tensor(ins[R], dtype), async_op=async_op)
        if async_op:
            work.wait()
        for r in range(N):
            check(outs[r], ins[r], f"all_gather[{r}] " + lbl)
        for root in range(N):
            ins = [values(r, count, k + root) for r in range(N)]
            b = tensor(ins[R], dtype, strided)
            run(lambda a: dist.broadcast(b, src=root, async_op=a), b, ins[root], f"broadcast root={root} " + lbl,
                async_op)
        # all_to_all_single, equal and uneven splits (rows of 3 elements)
        rows = count % 5 + 1
        send = [rows * (r + 1) for r in range(N)]  # rank r sends rank s (rows * (s+1)) rows
        src = [values(r, 3 * sum(send), k).reshape(-1, 3) for r in range(N)]
        want = np.concatenate([np.split(src[r], np.cumsum(send)[:-1])[R] for r in range(N)])
        out = torch.empty(want.shape, dtype=dtype)
        x = tensor(src[R], dtype)
        run(lambda a: dist.all_to_all_single(out, x, [send[R]] * N, send, async_op=a), out, want,
            "all_to_all_single uneven " + lbl, async_op)
        eq = [values(r, N * count, k) for r in range(N)]
        out2 = torch.empty(N * count, dtype=dtype)
        x2 = tensor(eq[R], dtype)
        want2 = np.concatenate([e[R * count:(R + 1) * count] for e in eq])
        run(lambda a: dist.all_to_all_single(out2, x2, async_op=a), out2, want2, "all_to_all_single " + lbl, async_op)
    flush()

# list-form reduce_scatter, uneven piece sizes
for op_name, op, factor in op_cases(torch.float32):
    base = "sum" if op_name == "premul" else op_name
    ins = [[values(r, 3 + p, p, base) for p in range(N)] for r in range(N)]
    out = torch.empty(3 + R)
    dist.reduce_scatter(out, [tensor(a, torch.float32) for a in ins[R]], op=op)
    check(out, reduce([ins[r][R] for r in range(N)], op_name, factor), f"reduce_scatter list {op_name}")

# reduce and gather to every root (the other ranks' tensors stay as they were)
for root in range(N):
    for op_name, op, factor in op_cases(torch.float32):
        base = "sum" if op_name == "premul" else op_name
        ins = [values(r, 11, root, base) for r in range(N)]
        t = tensor(ins[R], torch.float32)
        dist.reduce(t, dst=root, op=op)
        check(t, reduce(ins, op_name, factor) if R == root else ins[R], f"reduce {op_name} dst={root}")
    outs = [torch.empty(5, dtype=torch.int64) for _ in range(N)] if R == root else None
    dist.gather(tensor(values(R, 5, root), torch.int64), outs, dst=root)
    for r in range(N if R == root else 0):
        check(outs[r], values(r, 5, root), f"gather[{r}] dst={root}")
# point-to-point (MPI's own Isend/Irecv on a duplicate communicator): a ring shift, a
# strided receive, a receive from any source, large and bfloat16 messages
right, left = (R + 1) % N, (R - 1) % N
for count, dt in ((5, torch.float32), (300_001, torch.float32), (7, torch.bfloat16)):
    send_t = tensor(values(R, count, 8), dt)
    recv_t = torch.full((count,), -99.0, dtype=dt)
    sw = dist.isend(send_t, right, tag=3)
    dist.recv(recv_t, left, tag=3)
    sw.wait()
    check(recv_t, values(left, count, 8), f"send/recv ring shift {count} {dt}")
strided = torch.full((4, 6), -99.0)[:, ::2]  # a non-contiguous receive buffer
sw = dist.isend(tensor(values(R, 12, 9), torch.float32).reshape(4, 3), right, tag=4)
dist.recv(strided, left, tag=4)
sw.wait()
check(strided, values(left, 12, 9).reshape(4, 3), "recv into a strided tensor")
if N > 1:  # rank 0 receives from whoever sends: rank N-1
    if R == N - 1:
        dist.send(tensor(values(R, 9, 10), torch.float32), 0, tag=5)
    if R == 0:
        got = torch.empty(9)
        src = dist.recv(got, tag=5)
        check(got, values(N - 1, 9, 10), "recv from any source")
        checks += 1
        if src != N - 1:
            failures.append(f"FAIL rank {R}: recv from any source reported rank {src}, not {N - 1}")

# scatter (MPI's Iscatterv) and list-form all-to-all (Ialltoallv), exact
for root in range(N):
    out = torch.full((R + 2,), -99, dtype=torch.int64)
    pieces = [tensor(values(r, r + 2, root) * 10 + root, torch.int64) for r in range(N)] if R == root else None
    dist.scatter(out, pieces, src=root)
    check(out, values(R, R + 2, root) * 10 + root, f"scatter src={root}")
ins = [tensor(values(R, r + 1, 11 + r), torch.float64) for r in range(N)]  # piece r is r+1 long
outs = [torch.full((R + 1,), -99.0, dtype=torch.float64) for _ in range(N)]
dist.all_to_all(outs, ins)
for r in range(N):
    check(outs[r], values(r, R + 1, 11 + R), f"all_to_all list piece from {r}")
outs = [[torch.full((2, 2), -99.0), torch.full((3,), -99.0)] for _ in range(N)]  # torch wants one dtype
dist.all_gather_coalesced(outs, [tensor(values(R, 4, 12), torch.float32).reshape(2, 2),
                                 tensor(values(R, 3, 13), torch.float32)])
for r in range(N):
    check(outs[r][0], values(r, 4, 12).reshape(2, 2), f"all_gather_coalesced [{r}][0]")
    check(outs[r][1], values(r, 3, 13), f"all_gather_coalesced [{r}][1]")

# barrier: nobody leaves before the last one arrives
dist.barrier()  # everyone starts the clock together (within scheduling noise)
t0 = time.monotonic()
if R == N - 1:
    time.sleep(0.5)
dist.barrier()
if time.monotonic() - t0 < 0.25:
    failures.append(f"FAIL rank {R} barrier returned after {time.monotonic() - t0:.3f} s, before rank {N - 1}")
checks += 1

# a subgroup: every other rank
ranks = list(range(0, N, 2))
g = dist.new_group(ranks)
if R in ranks:
    t = torch.full((5,), float(R + 1))
    dist.all_reduce(t, group=g)
    check(t, np.full(5, float(sum(r + 1 for r in ranks))), f"new_group({ranks}) all_reduce")
dist.barrier()

# functional collectives and DTensor, which reach the group from C++ (the blocking lanes return None)
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Replicate, Shard, distribute_tensor  # noqa: E402

mine = tensor(values(R, 7, 21), torch.float32)
check(funcol.wait_tensor(funcol.all_reduce(mine, "sum", dist.group.WORLD)),
      reduce([values(r, 7, 21) for r in range(N)], "sum"), "funcol all_reduce")
check(funcol.wait_tensor(funcol.all_gather_tensor(mine, 0, dist.group.WORLD)),
      np.concatenate([values(r, 7, 21) for r in range(N)]), "funcol all_gather_tensor")
whole = torch.arange(4 * N * 3, dtype=torch.float64).reshape(4 * N, 3)
d = distribute_tensor(whole, init_device_mesh("cpu", (N,)), [Shard(0)])
check(d.full_tensor(), whole.numpy(), "DTensor full_tensor")
check(d.redistribute(d.device_mesh, [Replicate()]).to_local(), whole.numpy(), "DTensor redistribute")

# BAND on integers works (tests/mpi/torch_dtypes.py has every dtype and op); on floats the
# error names the op and the dtype
bits = torch.tensor([0b1110 | (1 << R), 0b0111], dtype=torch.int32)
dist.all_reduce(bits, op=dist.ReduceOp.BAND)
check(bits, np.array([0b1110 if N > 1 else 0b1111, 0b0111]), "all_reduce BAND int32")
try:
    dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)
    failures.append(f"FAIL rank {R} BAND on float32 did not raise")
except TypeError as e:
    checks += 1
    if "'band'" not in str(e) or "float32" not in str(e):
        failures.append(f"FAIL rank {R} BAND error does not name the op and dtype: {e}")

T1 = time.monotonic()
if "--train" in sys.argv:
    import torch_train
    if torch_train.main():
        failures.append("FAIL training comparisons (see FAIL lines above)")

# a mismatched call raises everywhere, naming ranks, before the timeout
t0 = time.monotonic()
try:
    work = dist.all_reduce(torch.ones(10 if R == 0 else 11), async_op=N == 3)  # 3: the async path's error
    if work is not None:
        work.wait()
    failures.append(f"FAIL rank {R}: mismatched all_reduce did not raise")
except Exception as e:  # noqa: BLE001
    took = time.monotonic() - t0
    checks += 1
    if "rank" not in str(e) or took > TIMEOUT_S:
        failures.append(f"FAIL rank {R}: mismatch error after {took:.1f} s: {e}")
    print(f"rank {R} mismatch raised after {took:.2f} s: {str(e).splitlines()[0][:200]}", flush=True)

if R == 0:
    print(f"times: imports+init {T0 - T_START:.1f} s, init cases and matrix {T1 - T0:.1f} s, "
          f"training {time.monotonic() - T1:.1f} s", flush=True)
# the groups end before the interpreter does: a Gloo thread still waiting when Python shuts down
# can abort the process ("terminate called without an active exception") after every check passed
dist.destroy_process_group()
for f in failures[:20]:
    print(f, flush=True)
if failures:
    print(f"rank {R}: {len(failures)} of {checks} checks failed", flush=True)
    sys.exit(1)
print(f"OK rank {R} checks {checks}", flush=True)
