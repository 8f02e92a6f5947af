"""The dtype table and every dtype it lists: the table's own consistency, the numpy
API on simulated ranks (every dtype and op, exact against numpy), and real mpirun
jobs: the numpy API on every road (tests/mpi/dtype_check.py), torch.distributed
against numpy and Gloo with object collectives, sparse all-reduce and a timeout
(tests/mpi/torch_dtypes.py), and FSDP2 with its buffers in the heap
(tests/mpi/torch_fsdp_heap.py).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from mpi4py import MPI

from collectives import Communicator, simulate
from collectives.arrays import adapt
from collectives.dtypes import (COLLECTIVES, DTYPES, KERNEL_DTYPES, OPS, TABLE, check_reduction, dtype_code, info,
                                torch_dtypes)
from collectives.fast.codes import DTYPES as C_DTYPES
from collectives.kernels import launch
from collectives.safety import header
from collectives.transport import Fabric
from dtype_cases import NEW, bad_ops_of, data, expected, ops_of, same

TINY = dict(chunk_bytes=16, small_bytes=0)  # the ring, many chunks


def test_the_table_is_one_and_the_maps_derive_from_it():
    codes = [row.code for row in TABLE]
    assert len(set(codes)) == len(codes) and len({row.numpy for row in TABLE}) == len(TABLE)
    # the wire codes of the first six never change (they travel in every header)
    assert [DTYPES[n].code for n in ("float16", "bfloat16", "float32", "float64", "int32", "int64")] == [1, 2, 3, 4, 5, 6]
    assert list(OPS.values()) == list(range(1, len(OPS) + 1)) and COLLECTIVES[0] == "all_reduce"
    assert header._NAMES["dtype"] == {row.code: row.name for row in TABLE}
    assert set(NEW) | set(KERNEL_DTYPES) == set(DTYPES)
    for row in TABLE:
        assert info(row.numpy) is row and info(row.name) is row and dtype_code(row.numpy) == row.code
        if row.mpi is not None:  # MPI's datatype has the element's size
            assert getattr(MPI, row.mpi).Get_size() == row.numpy.itemsize, row.name
        if row.kernel is not None:
            assert launch.reduce_kernel("sum", row.numpy).endswith("_" + row.kernel)
        else:
            with pytest.raises(TypeError, match=f"no CUDA kernels for dtype {row.name}"):
                launch.scale_kernel(row.numpy)
    # what the CUDA sources are compiled for: the kernel dtypes only
    assert {k.rsplit("_", 1)[1] for k in launch.kernel_names()["reduce.cu"]} == {DTYPES[n].kernel for n in KERNEL_DTYPES}
    # the C extension reduces a subset (fast/codes.py), every one of them in the table
    assert set(C_DTYPES) <= {row.numpy for row in TABLE}


def test_torch_names_every_row():
    torch = pytest.importorskip("torch")
    rows = torch_dtypes(torch)
    assert {row.name for row in rows.values()} == set(DTYPES)
    for t, row in rows.items():
        assert t.itemsize == row.numpy.itemsize and str(t) == f"torch.{row.name}"


def test_pairs_that_do_not_go_together_raise_naming_dtype_and_op():
    with pytest.raises(TypeError, match=r"rank 3: all_reduce: op 'band' does not apply to dtype float32; "
                                        r"float32 reduces with sum, prod, max, min, avg"):
        check_reduction(np.float32, "band", "all_reduce", 3)
    with pytest.raises(TypeError, match="op 'avg' does not apply to dtype bool"):
        check_reduction(np.bool_, "avg", "all_reduce")
    with pytest.raises(TypeError, match="float8_e4m3fn only moves"):
        check_reduction(DTYPES["float8_e4m3fn"].numpy, "sum", "reduce_scatter")
    with pytest.raises(TypeError, match="op 'bxor' has no CUDA kernel"):
        check_reduction(np.int32, "bxor", "all_reduce", device=True)
    with pytest.raises(ValueError, match="unknown op 'mean'"):
        check_reduction(np.int32, "mean", "all_reduce")


class _FakeDevice:
    """A host array dressed as a cupy one (its type's module says cupy)."""

    __module__ = "cupy_fake"

    def __init__(self, a):
        self.dtype, self.strides, self.flags = a.dtype, a.strides, a.flags


@pytest.mark.parametrize("name", NEW)
def test_device_arrays_of_dtypes_without_kernels_are_refused(name):
    with pytest.raises(TypeError, match=f"x: a device array of dtype {name}: the CUDA kernels cover"):
        adapt(_FakeDevice(np.zeros(4, DTYPES[name].numpy)), "x")


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_every_dtype_and_op_on_simulated_ranks(name, world):
    """all_reduce and reduce_scatter with every op the dtype takes, all_gather and broadcast,
    on the ring (tiny chunks) and the default roads, bit for bit numpy's; every op it does
    not take raises before a byte moves, and the communicator goes on."""
    counts_ = (0, 1, 13, 1000)

    def fn(c):
        got = {}
        for count in counts_:
            split = [count // world + (q < count % world) for q in range(world)]
            for op in ops_of(name):
                x = data(name, count, c.rank, op, world)
                got[("ar", count, op)] = c.all_reduce(x, op=op)
                got[("rs", count, op)] = c.reduce_scatter(x, op=op, counts=split)
                assert same(x, data(name, count, c.rank, op, world)), "input modified"
            for op in bad_ops_of(name):
                with pytest.raises(TypeError, match=f"op '{op}' does not apply to dtype {name}"):
                    c.all_reduce(data(name, count, c.rank, "sum", world), op=op)
            piece = data(name, split[c.rank], c.rank)
            got[("ag", count)] = c.all_gather(piece, counts=split)
            got[("bc", count)] = c.broadcast(data(name, count, c.rank), root=world - 1)
        return got

    for kw in (TINY, {}):
        results = simulate(world, fn, **kw)
        for count in counts_:
            split = [count // world + (q < count % world) for q in range(world)]
            lo = [sum(split[:q]) for q in range(world)]
            for op in ops_of(name):
                want = expected(name, count, op, world)
                for r, g in enumerate(results):
                    assert same(g[("ar", count, op)], want), (kw, count, op, r, g[("ar", count, op)][:5], want[:5])
                    assert same(g[("rs", count, op)], want[lo[r]:lo[r] + split[r]]), (kw, count, op, r)
            gathered = np.concatenate([data(name, split[q], q) for q in range(world)])
            for g in results:
                assert same(g[("ag", count)], gathered), (kw, count)
                assert same(g[("bc", count)], data(name, count, world - 1)), (kw, count)


def test_mpi_baseline_refuses_nothing_the_table_allows():
    """The baseline's maps (baselines/mpi.py) cover every row: every MPI name, the logical
    ops for bool, contiguous bytes for the types MPI has no datatype for."""
    from collectives.baselines import mpi as base

    for row in TABLE:
        for op in row.ops - {"avg"}:
            assert (base._LOGICAL_OPS if row.kind == "bool" else base._NATIVE_OPS)[op] is not None
        assert (row.numpy in base._NATIVE_TYPES) == (row.mpi is not None)


def _ok_lines(proc, n):
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    oks = [line for line in proc.stdout.splitlines() if line.startswith("OK rank")]
    assert len(oks) == n, out[-6000:]
    return oks


@pytest.mark.parametrize("n", [2, 3])
def test_numpy_api_every_dtype_every_road_under_mpirun(mpi, n):
    """tests/mpi/dtype_check.py: every dtype and op on the small path, pair or ring, MPI's
    own collectives, the heap's direct roads (read, one-phase, push) and staging, the pipe
    for gathers; the pipe refuses all-reduces of dtypes its C loop lacks."""
    proc = mpi(n, "dtype_check.py", timeout=300)
    res = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(res) == n, (proc.stdout + proc.stderr)[-6000:]
    for r in res:
        assert r["nfail"] == 0 and r["cases"] > 1000, r


@pytest.mark.parametrize("n", [2, 3])
def test_torch_every_dtype_objects_sparse_and_timeout_under_mpirun(mpi, n):
    """tests/mpi/torch_dtypes.py: dist.* on every dtype exact against numpy and equal to
    Gloo's result where Gloo takes the pair; object collectives; sparse COO all-reduce;
    a timeout caught as torch's DistBackendError naming the rank that never arrived."""
    proc = mpi(n, "torch_dtypes.py", timeout=300)
    oks = _ok_lines(proc, n)
    assert all("gloo-equal" in line for line in oks), oks
    caught = [line for line in proc.stdout.splitlines() if line.startswith("CAUGHT")]
    assert len(caught) == 3 * (n - 1), proc.stdout[-4000:]  # sync, async and barrier on every rank but the absent
    # the absent rank named: "never arrived" (the header agreement) or "never signalled" (shared memory)
    assert all(f"rank {n - 1} never" in line and " Timed out " in line for line in caught), caught


def test_object_collectives_at_four_ranks(mpi):
    proc = mpi(4, "torch_dtypes.py", "--objects", timeout=240)
    _ok_lines(proc, 4)


@pytest.mark.parametrize("n, args", [(2, []), (4, ["--close"])])
def test_fsdp2_heap_comm_buffers_train_the_same_weights(mpi, n, args):
    proc = mpi(n, "torch_fsdp_heap.py", *args, timeout=240)
    oks = _ok_lines(proc, n)
    assert all("all in the first step" in line for line in oks), oks


def test_heap_pool_agrees_when_one_rank_keeps_a_tensor_longer(mpi):
    """A rank whose tensor from the FSDP2 heap pool lives longer than its peer's: both make
    a window (agreed), none waits for the other; tests/mpi/heap_pool_check.py."""
    proc = mpi(2, "heap_pool_check.py", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in res) == [0, 1], proc.stdout[-3000:]
    for r in res:
        assert r["failures"] == [] and (r["made"], r["hits"]) == (2, 1), r
