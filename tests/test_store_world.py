"""The store world: torchrun, mp.spawn and plain processes, over torch's store and Gloo.

How a world is chosen (a grid over the launchers' variables), StoreBootstrap's
steps and errors on threads over one HashStore, then real launches: the
Communicator over the store and Gloo (tests/store/store_check.py), failures that
name the absent rank and leave no thread behind (store_faults.py), a crash during
heap setup that leaves a segment the next run sweeps (shm_crash.py), the dist.*
matrix and the training comparisons of tests/mpi/ under torchrun, heap tensors on
the direct roads, and examples/train_torch.py under torchrun, mp.spawn and mpirun.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from collectives.bootstrap.choose import choose_world, disagreement
from collectives.errors import SetupError
from collectives.symmetric.shm import PREFIX, sweep
from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd

STORE_SCRIPTS = Path(__file__).resolve().parent / "store"
TORCHRUN = Path(sys.executable).parent / "torchrun"


@pytest.mark.parametrize("env, kind", [
    ({}, "store"),  # plain python, mp.spawn
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "store"),  # env:// by hand, srun
    ({"OMPI_COMM_WORLD_SIZE": "4"}, "mpi"),  # mpirun
    ({"OMPI_COMM_WORLD_SIZE": "4", "WORLD_SIZE": "4"}, "mpi"),  # mpirun with the torch variables set too
    ({"OMPI_COMM_WORLD_SIZE": "1", "WORLD_SIZE": "4"}, "store"),  # mpirun -n 1 torchrun ... (or its children)
    ({"PMI_SIZE": "3", "WORLD_SIZE": "3"}, "mpi"),  # MPICH's Hydra
    ({"PMI_SIZE": "3", "WORLD_SIZE": "6"}, "store"),
    ({"PMIX_RANK": "0", "SLURM_STEP_NUM_TASKS": "8"}, "mpi"),  # srun --mpi=pmix
    ({"PMIX_RANK": "0", "SLURM_STEP_NUM_TASKS": "2", "WORLD_SIZE": "8"}, "store"),
    ({"OMPI_COMM_WORLD_SIZE": "2", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"}, "store"),  # torchrun's child
])
def test_the_world_follows_the_launcher(env, kind):
    assert choose_world(env).kind == kind, choose_world(env)


def test_the_world_can_be_forced_and_a_disagreement_says_what_to_do():
    assert choose_world({}, "mpi").kind == "mpi" and choose_world({"OMPI_COMM_WORLD_SIZE": "2"}, "store").kind == "store"
    with pytest.raises(ValueError, match="RINGZERO_WORLD"):
        choose_world({}, "nccl")
    w = choose_world({"OMPI_COMM_WORLD_SIZE": "2"})
    msg = disagreement(w, 3, 2, 1)
    assert "torch's world has 3 ranks but MPI's has 2 (OMPI_COMM_WORLD_SIZE=2; torch rank 1)" in msg
    assert "mpirun -n 3" in msg and "torchrun" in msg and "WORLD_SIZE=3" in msg and "RINGZERO_WORLD=store" in msg


def _threads(n, fn):
    """fn(rank) on n threads; every rank's result or exception, in rank order."""
    out = [None] * n

    def run(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: BLE001
            out[r] = e
    ts = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_store_bootstrap_steps_on_one_store(n):
    import torch.distributed as dist

    from collectives.bootstrap.store import StoreBootstrap
    store = dist.HashStore()

    def fn(r):
        b = StoreBootstrap(store, r, n, timeout=20)
        got = [b.allgather_obj(("x", r, i)) for i in range(4)]  # keys of old steps are deleted as it goes
        root = b.broadcast_obj(list(range(r + 3)) if r == n - 1 else None, n - 1)
        b.barrier()
        half = b.split(r % 2, -r)
        node = b.node(2)
        try:
            b.agree(r != n - 1, "the thing", f"rank {r} had no luck", "try again")
        except SetupError as e:
            failed = str(e)
        else:
            failed = ""
        return got, root, (half.rank, half.size, half.allgather_obj(r)), (node.rank, node.size), failed

    for r, (got, root, half, node, failed) in enumerate(_threads(n, fn)):
        assert got == [[("x", q, i) for q in range(n)] for i in range(4)]
        assert root == list(range(n + 2))
        members = [q for q in range(n) if q % 2 == r % 2][::-1]
        assert half == (members.index(r), len(members), members)
        assert node == (r % 2, min(2, n - r // 2 * 2))
        assert f"the thing failed on rank(s) [{n - 1}] of {n}: rank {n - 1}: rank {n - 1} had no luck. try again" \
            in failed and failed.startswith(f"rank {r}:")


def test_a_rank_that_never_comes_is_named_by_the_step():
    import torch.distributed as dist

    from collectives.bootstrap.store import StoreBootstrap
    store = dist.HashStore()
    out = _threads(2, lambda r: StoreBootstrap(store, r, 3, timeout=1).agree(True, "mapping heap window 2"))
    for r, e in enumerate(out):
        assert isinstance(e, SetupError), e
        assert str(e).startswith(f"rank {r}: setup step 'allgather' timed out after 1 s: rank(s) [2] of 3 never")
        assert str(e).endswith("the step: mapping heap window 2")


def test_sweep_removes_segments_whose_owner_is_gone(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, live = f"{PREFIX}abc123-{int(gone.stdout)}-0", f"{PREFIX}abc123-{os.getpid()}-1"
    for name in (dead, live, "other-file"):
        (tmp_path / name).write_bytes(b"x")
    assert sweep(str(tmp_path)) == [dead]
    assert sorted(os.listdir(tmp_path)) == sorted([live, "other-file"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
              "PMIX_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(v, None)
    env.update(extra)
    return env


def torchrun(n: int, script, *args, timeout=300, **env) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node n script args`` (never hangs)."""
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", str(n), str(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(**env), cwd=ROOT)


def _ok(p, n, what="OK rank"):
    out = p.stdout + p.stderr[-4000:]
    assert p.returncode == 0, out[-6000:]
    assert p.stdout.count(what) == n, out[-6000:]  # ranks' lines may interleave
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_communicator_over_the_store_and_gloo(n):
    _ok(torchrun(n, STORE_SCRIPTS / "store_check.py"), n)


def test_failures_name_the_absent_rank_and_leave_no_thread():
    p = torchrun(3, STORE_SCRIPTS / "store_faults.py")
    out = _ok(p, 3)
    assert out.count("PASS setup step") == 2 and out.count("PASS collective timeout") == 2, out[-3000:]
    assert "terminate called" not in out


def test_a_crash_during_heap_setup_leaves_a_segment_the_next_run_sweeps(tmp_path):
    def run(mode):
        env = dict(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RINGZERO_SHM_DIR=str(tmp_path))
        ps = [subprocess.Popen([sys.executable, str(STORE_SCRIPTS / "shm_crash.py"), mode], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_env(RANK=str(r), **env), cwd=ROOT)
              for r in range(2)]
        return [(p.wait(120), p.stdout.read()) for p in ps]
    (rc0, out0), (rc1, _) = run("crash")
    assert rc1 == 3 and rc0 == 2, out0
    assert "SetupError" in out0 and "rank(s) [1] of 2 never joined it" in out0 and "heap window 0" in out0, out0
    left = os.listdir(tmp_path)
    assert len(left) == 1 and left[0].startswith(PREFIX), left  # rank 1's segment; rank 0 removed its own
    (rc0, out0), (rc1, out1) = run("clean")
    assert rc0 == rc1 == 0, out0 + out1
    assert "left in the folder: []" in out0 and os.listdir(tmp_path) == [], (out0, os.listdir(tmp_path))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_dist_collectives_exact_under_torchrun(n):
    """tests/mpi/torch_collectives.py (every dist.* call, exact) in a store world; at 4 ranks
    also DDP, ZeroRedundancyOptimizer, FSDP2 and HSDP against one-process training."""
    p = torchrun(n, MPI_SCRIPTS / "torch_collectives.py", *(["--train"] if n == 4 else []), timeout=500)
    out = _ok(p, n)
    assert out.count("mismatch raised") == n, out[-3000:]
    if n == 4:
        for case in ("ddp", "zero1", "fsdp2", "fsdp2-zero2", "hsdp"):
            for opt in ("sgd", "adamw"):
                assert out.count(f"PASS {case} {opt} ") == 4, (case, opt, out[-3000:])


@pytest.mark.parametrize("n", [2, 3])
def test_heap_tensors_take_the_direct_path_under_torchrun(n):
    import json
    p = torchrun(n, MPI_SCRIPTS / "torch_heap.py", COLLECTIVES_STAGE="0")
    dec, text = json.JSONDecoder(), p.stdout  # ranks' lines may interleave: decode each object where it starts
    lines = [dec.raw_decode(text, i)[0] for i in range(len(text)) if text.startswith('{"rank"', i)]
    assert p.returncode == 0 and len(lines) == n, p.stdout[-3000:] + p.stderr[-3000:]
    for r in lines:
        assert r["nfail"] == 0 and r["cases"] == 60, r["failures"]
        assert r["paths"] and all(x.startswith("direct") for x in r["paths"]) and r["located"], r


EXAMPLE = ROOT / "examples" / "train_torch.py"


@pytest.mark.parametrize("how", ["torchrun-2", "torchrun-4-hsdp", "spawn-2", "mpirun-2", "python-1"])
def test_train_torch_has_identical_weights_on_every_rank(how):
    if how == "torchrun-2":
        p = torchrun(2, EXAMPLE, "--steps", "5")
    elif how == "torchrun-4-hsdp":
        p = torchrun(4, EXAMPLE, "--hsdp", "--steps", "5")
    elif how == "mpirun-2":
        p = subprocess.run(mpirun_cmd(2) + [sys.executable, str(EXAMPLE), "--steps", "5"], capture_output=True,
                           text=True, timeout=300, env=mpi_env(), cwd=ROOT)
    else:
        extra = ["--spawn", "2"] if how == "spawn-2" else []
        p = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "5", *extra], capture_output=True, text=True,
                           timeout=300, env=_env(), cwd=ROOT)
    n = {"torchrun-2": 2, "torchrun-4-hsdp": 4, "spawn-2": 2, "mpirun-2": 2, "python-1": 1}[how]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"{n} ranks, 140289 parameters, 5 steps" in p.stdout and "weights identical on every rank: True" in p.stdout
