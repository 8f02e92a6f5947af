"""The symmetric heap and its direct collectives (collectives/symmetric), under mpirun.

One launch per world size runs the whole grid (tests/mpi/symmetric_check.py).
"""
import json
import subprocess
import sys

import pytest

from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd, run_mpi


def _results(proc, n):
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == n, proc.stdout[-3000:] + proc.stderr[-3000:]
    return lines


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_direct_grid_matches_numpy(n):
    for res in _results(run_mpi(n, "symmetric_check.py", "grid", *(["--quick"] if n > 3 else []), timeout=300), n):
        assert res["path"] == "direct"
        assert res["nfail"] == 0, res["failures"]
        assert res["cases"] > 1000


def test_mismatch_raises_on_every_rank():
    for res in _results(run_mpi(3, "symmetric_check.py", "mismatch"), 3):
        assert res["nfail"] == 0, res["failures"]
        msgs = res["messages"]
        assert "count differs (rank 0: 9, rank 1: 9, rank 2: 8)" in msgs["count"]
        assert "collective differs" in msgs["collective"] and "broadcast" in msgs["collective"]


def test_absent_peer_times_out_naming_it():
    res = _results(run_mpi(3, "symmetric_check.py", "absent"), 3)
    for r in res:
        assert r["nfail"] == 0, r["failures"]
    for r in res[:2]:
        if r["rank"] != 2:
            assert "rank 2 never signalled" in r["message"] and r["seconds"] < 5


def _two_nodes(mode, *args):
    """4 ranks as 2 nodes of 2 (COLLECTIVES_NODE_SIZE=2), TCP between them."""
    env = dict(mpi_env(), COLLECTIVES_NODE_SIZE="2")
    cmd = mpirun_cmd(4) + ["--mca", "btl", "tcp,self", sys.executable, str(MPI_SCRIPTS / "symmetric_check.py"),
                           mode, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def test_two_nodes_hierarchical_grid_matches_numpy():
    for res in _results(_two_nodes("grid", "--quick"), 4):
        assert res["path"] == "hier 2x2"
        assert res["nfail"] == 0, res["failures"]
        assert res["cases"] > 1000


def test_two_nodes_mismatch_raises_on_every_rank():
    res = _results(_two_nodes("mismatch"), 4)
    for r in res:
        assert r["nfail"] == 0, r["failures"]
    node1 = [r for r in res if r["rank"] >= 2]
    assert all("count differs (rank 0: 9, rank 1: 8)" in r["messages"]["count"] for r in node1)


def test_staged_ordinary_arrays_take_the_direct_path():
    """COLLECTIVES_STAGE=1: ordinary (and mixed) arrays, exact, with direct reads traced;
    and the library's own grid (numpy and MPI's own results, bit for bit) through it."""
    # the stage window grows often here: Open MPI's UCX one-sided component, which
    # declines every shared window, crashed once while declining (free() in ucp_cleanup)
    env = dict(mpi_env(), COLLECTIVES_STAGE="1", OMPI_MCA_osc="^ucx")
    # two ranks: the one-phase staged all-reduce and the finish without a wait;
    # back-to-back calls check the alternating stage halves (one half fails them)
    for n, script, args in ((2, "symmetric_check.py", ["staged"]), (3, "symmetric_check.py", ["staged"]),
                            (3, "check_collectives.py", ["--quick"])):
        cmd = mpirun_cmd(n) + [sys.executable, str(MPI_SCRIPTS / script), *args]
        for res in _results(subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT), n):
            assert res["nfail"] == 0, (script, res["failures"])
            assert res.get("stage", True)


@pytest.mark.parametrize("n", [2, 3])
def test_in_place_all_reduce_read_in_place(n):
    """Private arrays past the stage limit, in and out of place: every x and out read in
    place, exact (every op, several dtypes, several chunks), in Python and as C programs,
    for the same arrays, fresh views and new arrays; a heap x on one rank: the staged-ring."""
    proc = run_mpi(n, "cma_all_reduce_check.py", timeout=300)
    lines = [json.loads(s) for s in proc.stdout.splitlines() if s.startswith("{")]
    assert proc.returncode == 0 and len(lines) == n, proc.stdout[-3000:] + proc.stderr[-3000:]
    for res in lines:
        assert res["failures"] == [] and res["cases"] >= 200, res
        assert res["c_runs"] > 0, res  # the repeated calls ran as C programs


@pytest.mark.parametrize("n,node_size", [(2, None), (3, None), (2, "1")])
def test_default_staging_limits_both_sides_and_the_switch(n, node_size):
    """Staging by default (COLLECTIVES_STAGE unset): on two ranks each collective is
    staged up to its limit and takes the ring just above it (traced: direct reads,
    then ring phases; exact, with a heap array on one rank too); =0 takes the ring
    and =1 stages at every size; the control window is all that construction adds
    and the stage window stays within twice the largest limit; with =0, a heap array
    against an ordinary one times out on both sides, naming the peer. Three ranks: no
    default staging (nothing measured there), nor two ranks as two nodes."""
    env = dict(mpi_env(), OMPI_MCA_osc="^ucx")
    env.pop("COLLECTIVES_STAGE", None)
    env.pop("COLLECTIVES_NODE_SIZE", None)
    if node_size:
        env["COLLECTIVES_NODE_SIZE"] = node_size
    cmd = mpirun_cmd(n) + [sys.executable, str(MPI_SCRIPTS / "symmetric_check.py"), "defaults"]
    res = _results(subprocess.run(cmd, capture_output=True, text=True, timeout=200, env=env, cwd=ROOT), n)
    for r in res:
        assert r["nfail"] == 0, r["failures"]
        staged = n == 2 and not node_size
        assert r["stage"] is staged, r
        if staged:
            assert r["cases"] == 33 and r["memory_at_start"] <= 4096, r
            assert 0 < r["stage_window"] <= 4 << 20, r
            assert r["split_seconds"] < 3, r  # COLLECTIVES_STAGE=0, heap vs ordinary: the deadline, no hang


def test_default_staging_does_not_depend_on_the_import_order_of_mpi4py():
    """The heap is POSIX shared memory, not MPI windows: whether mpi4py.MPI was imported
    first, and whatever OMPI_MCA_osc says, two ranks stage ordinary arrays alike."""
    import subprocess
    import sys

    from conftest import ROOT, mpi_env, mpirun_cmd

    script = str(ROOT / "tests" / "mpi" / "stage_import_order.py")
    for osc in (None, "^ucx"):
        env = mpi_env()
        env.pop("OMPI_MCA_osc", None)
        env.pop("COLLECTIVES_STAGE", None)
        if osc is not None:
            env["OMPI_MCA_osc"] = osc
        p = subprocess.run(mpirun_cmd(2) + [sys.executable, script], capture_output=True, text=True,
                           timeout=120, env=env, cwd=ROOT)
        assert p.returncode == 0, p.stderr[-3000:]
        lines = sorted(line for line in p.stdout.splitlines() if line.startswith("rank "))
        assert lines == [f"rank {r} staged=True road=one-phase exact=True" for r in range(2)], (osc, p.stdout[-2000:])


class _OneRank:
    """The node calls Heap makes, for a node of one rank (no launcher needed)."""
    rank, size = 0, 1

    def allgather_obj(self, obj):
        return [obj]

    def broadcast_obj(self, obj, root=0):
        return obj

    def agree(self, ok, what, detail="", hint="", error=None):
        assert ok, f"{what}: {detail}"


def test_heap_tensor_views_are_always_found(tmp_path):
    """Every view of every heap tensor is found in the heap, whatever ids dead arrays
    left behind: the heap keyed its windows by the ids of arrays that died at once, so a
    torch temporary that took such an id (bfloat16's int16 view) seemed to lie in another
    window and its collective left the direct road (2 of 6000 views here, before)."""
    torch = pytest.importorskip("torch")
    import ml_dtypes
    import numpy as np

    from collectives.dtypes import numpy_to_torch
    from collectives.symmetric.heap import Heap

    heap = Heap(_OneRank(), str(tmp_path))
    try:
        tensors = []
        for _ in range(150):
            tensors.append(numpy_to_torch(torch, heap.alloc((64,), ml_dtypes.bfloat16), torch.bfloat16))
            tensors.append(torch.from_numpy(heap.alloc((64,), np.float32)))
        lost = []
        for rep in range(20):
            for i, t in enumerate(tensors):
                v = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
                for part in (v, v[:8]):
                    if heap.locate(part) != (i, 0):
                        lost.append((rep, i, heap.locate(part)))
        assert not lost, lost[:10]
    finally:
        heap.close()
