"""Every dtype through torch.distributed over "ringzero", against numpy and Gloo; object
collectives; sparse COO all-reduce; a timeout in torch's terms.

Run under mpirun (2 or more ranks). A Gloo group over the same ranks (the
store that the MPI rendezvous made) runs the same calls:

1. For every torch dtype of the table: all_reduce with every op the dtype
   takes (sizes past the small path too), reduce_scatter_tensor, all_gather
   (list and into a tensor) and broadcast, exact against numpy
   (tests/dtype_cases.py), and equal to Gloo's result wherever Gloo takes
   the pair (bool by truth value: Gloo leaves byte sums in bools). A pair the
   table refuses raises TypeError or ValueError naming dtype and op, before a
   byte moves: the next collective still works.
2. all_gather_object, broadcast_object_list, gather_object and
   scatter_object_list round-trip nested objects.
3. A sparse COO all-reduce equals Gloo's (and the dense sum).
4. Last, rank n-1 stays away: the others' all_reduce (blocking, then async
   and waited) and barrier raise torch's DistBackendError saying "Timed out"
   and naming the rank that never arrived ("CAUGHT ..." lines).

``--objects``: only part 2 (the 4-rank run). Prints "OK rank r ..." when all
passed, "FAIL ..." lines otherwise; exits 1 on any failure.
"""
from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import collectives.torch_backend  # noqa: F401  registers "ringzero"
from collectives.dtypes import torch_dtypes

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dtype_cases import bad_ops_of, data, expected, ops_of, same  # noqa: E402

TIMEOUT_S = 3
dist.init_process_group(backend="ringzero", timeout=timedelta(seconds=TIMEOUT_S))
R, N = dist.get_rank(), dist.get_world_size()
RZ = dist.group.WORLD
GLOO = None if "--objects" in sys.argv else dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
ROWS = {row.name: (t, row) for t, row in torch_dtypes(torch).items()}
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
failures: list[str] = []
checks = gloo_checks = 0


def tensor(name: str, a: np.ndarray) -> torch.Tensor:
    t, row = ROWS[name]
    a = np.ascontiguousarray(a)
    if row.numpy.type.__module__.startswith("ml_dtypes"):  # numpy cannot hand these to torch itself
        return torch.from_numpy(a.view(np.uint8 if a.itemsize == 1 else np.int16).copy()).view(t)
    return torch.from_numpy(a.copy())


def as_numpy(name: str, t: torch.Tensor) -> np.ndarray:
    _, row = ROWS[name]
    t = t.detach().contiguous()
    if row.numpy.type.__module__.startswith("ml_dtypes"):
        return t.view(torch.uint8 if t.element_size() == 1 else torch.int16).numpy().view(row.numpy)
    return t.numpy()


def check(label: str, got: torch.Tensor, want: np.ndarray) -> None:
    global checks
    checks += 1
    g = as_numpy(label.split()[1], got)
    if not same(g, want):
        failures.append(f"FAIL rank {R}: {label}: got {g[:5]} want {np.asarray(want)[:5]}")


def gloo(label: str, name: str, ours: torch.Tensor, call) -> None:
    """The same call on the Gloo group; where Gloo takes it, the results must be equal."""
    global gloo_checks
    try:
        theirs = call(GLOO)
    except (RuntimeError, ValueError, TypeError):
        return  # Gloo refuses this dtype or op (int16, uint16+, float8, avg on integers, ...)
    gloo_checks += 1
    if not same(as_numpy(name, ours), as_numpy(name, theirs)):
        failures.append(f"FAIL rank {R}: {label}: differs from Gloo's {as_numpy(name, theirs)[:5]}")


def dtypes_part() -> None:
    for name in ROWS:
        for count in (1, 7, 1031, 40001):
            for op in ops_of(name):
                x = tensor(name, data(name, count, R, op, N))
                want = expected(name, count, op, N)

                def ar(g, x=x, op=op):
                    y = x.clone()
                    dist.all_reduce(y, op=OPS[op], group=g)
                    return y
                got = ar(RZ)
                check(f"all_reduce {name} {op} count={count}", got, want)
                gloo(f"all_reduce {name} {op} count={count}", name, got, ar)
                if count % N == 0 or count == 1031:
                    c = count - count % N
                    seg = want[:c].reshape(N, -1)[R]

                    def rs(g, x=x, op=op, c=c):
                        out = torch.empty(c // N, dtype=x.dtype)
                        dist.reduce_scatter_tensor(out, x[:c].contiguous(), op=OPS[op], group=g)
                        return out
                    got = rs(RZ)
                    check(f"reduce_scatter_tensor {name} {op} count={c}", got, seg)
                    gloo(f"reduce_scatter_tensor {name} {op} count={c}", name, got, rs)
            for op in bad_ops_of(name):
                try:
                    dist.all_reduce(tensor(name, data(name, count, R, "sum", N)), op=OPS[op])
                    failures.append(f"FAIL rank {R}: all_reduce {name} {op}: no error")
                except (TypeError, ValueError) as e:  # ours names the dtype; torch's own, for complex, says so
                    if name not in str(e) and not (ROWS[name][1].kind == "complex" and "complex" in str(e)):
                        failures.append(f"FAIL rank {R}: all_reduce {name} {op}: the error names no dtype: {e}")
            x = tensor(name, data(name, count, R))
            gathered = np.concatenate([data(name, count, q) for q in range(N)])

            def ag(g, x=x):
                out = torch.empty(count * N, dtype=x.dtype)
                dist.all_gather_into_tensor(out, x, group=g)
                return out

            def ag_list(g, x=x):
                outs = [torch.empty_like(x) for _ in range(N)]
                dist.all_gather(outs, x, group=g)
                return torch.cat(outs)

            def bc(g, x=x, root=count % N):
                y = x.clone()
                dist.broadcast(y, src=root, group=g)
                return y
            for label, call, want in (("all_gather_into_tensor", ag, gathered), ("all_gather", ag_list, gathered),
                                      ("broadcast", bc, data(name, count, count % N))):
                got = call(RZ)
                check(f"{label} {name} count={count}", got, want)
                gloo(f"{label} {name} count={count}", name, got, call)


def nested(r: int):
    return {"rank": r, "list": [1, (2.5, None), {"deep": [r] * (r + 1), "s": "é" * r}], "set": frozenset({r, -r}),
            "bytes": bytes(range(r * 7 % 256)), "tensor": torch.arange(r + 3), "big": list(range(2000 * r))}


def same_obj(a, b) -> bool:
    return (isinstance(a, dict) and a.keys() == b.keys() and torch.equal(a["tensor"], b["tensor"])
            and all(a[k] == b[k] for k in a if k != "tensor"))


def objects_part() -> None:
    global checks
    out = [None] * N
    dist.all_gather_object(out, nested(R))
    checks += 1
    if not all(same_obj(out[q], nested(q)) for q in range(N)):
        failures.append(f"FAIL rank {R}: all_gather_object: {out}")
    src = N - 1
    lst = [nested(src), "two", [3, {4: 5}]] if R == src else [None, None, None]
    dist.broadcast_object_list(lst, src=src)
    checks += 1
    if not (same_obj(lst[0], nested(src)) and lst[1:] == ["two", [3, {4: 5}]]):
        failures.append(f"FAIL rank {R}: broadcast_object_list: {lst}")
    dst = 1 % N
    got = [None] * N if R == dst else None
    dist.gather_object(nested(R), got, dst=dst)
    checks += 1
    if R == dst and not all(same_obj(got[q], nested(q)) for q in range(N)):
        failures.append(f"FAIL rank {R}: gather_object: {got}")
    mine = [None]
    dist.scatter_object_list(mine, [nested(10 + q) for q in range(N)] if R == 0 else None, src=0)
    checks += 1
    if not same_obj(mine[0], nested(10 + R)):
        failures.append(f"FAIL rank {R}: scatter_object_list: {mine}")


def sparse_part() -> None:
    global checks, gloo_checks
    for sparse_dims, dense_dims in ((1, 0), (2, 0), (1, 2)):
        idx = torch.stack([torch.arange(R + 1) % N] + [torch.zeros(R + 1, dtype=torch.long)] * (sparse_dims - 1))
        shape = [N] * sparse_dims + [2] * dense_dims
        vals = torch.full([R + 1] + [2] * dense_dims, float(R + 1))
        dense = sum(torch.sparse_coo_tensor(torch.stack([torch.arange(q + 1) % N] +
                                                        [torch.zeros(q + 1, dtype=torch.long)] * (sparse_dims - 1)),
                                            torch.full([q + 1] + [2] * dense_dims, float(q + 1)), shape).to_dense()
                    for q in range(N))
        ours, theirs = (torch.sparse_coo_tensor(idx, vals, shape) for _ in range(2))
        dist.all_reduce(ours)
        dist.all_reduce(theirs, group=GLOO)
        checks += 1
        gloo_checks += 1
        if not (ours.is_coalesced() and torch.equal(ours.to_dense(), dense) and torch.equal(ours.indices(), theirs.coalesce().indices())
                and torch.equal(ours.values(), theirs.coalesce().values())):
            failures.append(f"FAIL rank {R}: sparse all_reduce {sparse_dims}+{dense_dims} dims: {ours} vs Gloo {theirs}")
    try:
        dist.all_reduce(torch.eye(3).to_sparse_csr())
        failures.append(f"FAIL rank {R}: a CSR all_reduce raised nothing")
    except TypeError as e:
        if "sparse_csr" not in str(e):
            failures.append(f"FAIL rank {R}: CSR all_reduce: {e}")


def timeout_part() -> None:
    """Rank N-1 stays away from three collectives, each on its own group (a group is
    unusable after an error); the others must raise DistBackendError."""
    groups = [dist.new_group(backend="ringzero", timeout=timedelta(seconds=TIMEOUT_S)) for _ in range(3)]
    if R == N - 1:
        time.sleep(3 * TIMEOUT_S + 8)
        return
    for how, g in zip(("sync", "async", "barrier"), groups):
        t0 = time.monotonic()
        try:
            if how == "sync":
                dist.all_reduce(torch.ones(4), group=g)
            elif how == "async":
                dist.all_reduce(torch.ones(4), group=g, async_op=True).wait()
            else:
                dist.barrier(group=g)
            print(f"FAIL rank {R}: {how}: no timeout", flush=True)
        except dist.DistBackendError as e:
            print(f"CAUGHT rank {R} {how} after {time.monotonic() - t0:.1f} s: {str(e)[:400]}", flush=True)


if "--objects" in sys.argv:
    objects_part()
else:
    dtypes_part()
    objects_part()
    sparse_part()
for f in failures[:30]:
    print(f, flush=True)
if not failures:
    print(f"OK rank {R} checks {checks}, gloo-equal {gloo_checks}", flush=True)
if "--objects" not in sys.argv:
    timeout_part()
from mpi4py import MPI  # noqa: E402  (initialised already, by the backend)

MPI.COMM_WORLD.Barrier()  # the absent rank is back
dist.destroy_process_group()  # before the interpreter ends: no Gloo thread is left to the exit
sys.exit(1 if failures else 0)
