"""The torch.distributed backend "ringzero": dist.* collectives, training, CUDA.

One mpirun launch per world size (2, 3, 4) runs the whole dist.* matrix
(tests/mpi/torch_collectives.py: every collective, dtype, op, size, async
and strided, exact against numpy, then a mismatched call that must raise on
every rank); the 2-rank launch also runs the init variants and the trace,
the 4-rank one trains DDP, FSDP2, HSDP and ZeroRedundancyOptimizer against
one-process training.
"""
from __future__ import annotations

import json

import threading

import pytest

from collectives.engine import Engine


def test_work_done_callback_runs_once_on_the_progress_thread():
    """What the torch futures rely on: the callback fires when the work finishes (on
    the engine's thread), or at once when added later; result() gives the outcome."""
    engine = Engine("cb-test")
    gate, seen = threading.Event(), []
    ok = engine.submit(lambda: gate.wait(10) and 42, "ok")
    ok.add_done_callback(lambda w: seen.append(("ok", w.result(), threading.current_thread().name)))
    assert seen == []  # still running
    gate.set()
    bad = engine.submit(lambda: 1 / 0, "bad")
    engine.drain()
    errors = []

    def on_bad(w):
        try:
            w.result()
        except ZeroDivisionError as e:
            errors.append(e)
    bad.add_done_callback(on_bad)  # already finished: runs now, here
    assert seen == [("ok", 42, "cb-test")] and len(errors) == 1
    assert ok.wait() == 42  # result() did not count as the one wait()
    engine.close()


torch = pytest.importorskip("torch")


def _assert_all_ranks_ok(proc, n):
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    oks = [line for line in proc.stdout.splitlines() if line.startswith("OK rank")]
    assert len(oks) == n, out[-6000:]
    return out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_dist_collectives_exact(mpi, n, tmp_path):
    """The dist.* matrix at n ranks; at 2 also the init variants and the trace, at 4
    the training comparisons (one launch each: importing torch costs seconds)."""
    extra = {2: ["--init", str(tmp_path / "trace.json")], 3: [], 4: ["--train"]}[n]
    proc = mpi(n, "torch_collectives.py", *extra, timeout=300)
    out = _assert_all_ranks_ok(proc, n)
    # the mismatched all_reduce raised on every rank, naming the disagreeing ranks
    raised = [line for line in proc.stdout.splitlines() if "mismatch raised" in line]
    assert len(raised) == n, out[-3000:]
    assert all("count differs (rank 0: 10, rank" in line for line in raised), raised
    if n == 2:  # a wrong world size fails at once; explicit rank/world_size, store and tcp:// work
        for case in ("world_size mismatch", "explicit rank and world_size", "explicit store", "tcp init_method"):
            assert out.count(f"PASS {case}") == 2, (case, out[-3000:])
        for r in range(2):  # COLLECTIVES_TRACE recorded DDP's gradient all-reduces: on two ranks
            # ordinary tensors are staged by default, so direct reads (received bytes) and the
            # ring's reduce-scatter above the stage limit
            events = json.loads((tmp_path / f"trace.rank{r}.json").read_text())["traceEvents"]
            reduces = [e for e in events if e["name"].startswith("all_reduce") and e.get("ph") == "X"]
            assert reduces and sum(e["args"]["bytes_recv"] for e in reduces) > 4 * 256 * 256, events[:5]
            assert any((e.get("cat") == "reduce" and "reduce-scatter" in e["name"]) or
                       (e.get("cat") == "recv" and "direct" in e["name"]) for e in events), events[:9]
    if n == 4:  # DDP, ZeroRedundancyOptimizer, FSDP2 (resharding and not), HSDP on a 2x2 mesh,
        for case in ("ddp", "zero1", "fsdp2", "fsdp2-zero2", "hsdp"):  # SGD+momentum and AdamW:
            for opt in ("sgd", "adamw"):  # 5 steps equal one-process training within 1e-6
                assert out.count(f"PASS {case} {opt} ") == 4, (case, opt, out[-3000:])


@pytest.mark.parametrize("n", [2, 3])
def test_heap_tensors_take_the_direct_path(n):
    """torch_backend.alloc (and Communicator.alloc with a torch dtype) puts tensors in the
    node's symmetric heap: with staging off, dist.* on them read peers' memory (the
    trace's only data phase is the direct path's), exact against numpy, over float32,
    float64, bfloat16 and int64, repeated (the C programs); a non-ringzero group is refused."""
    import subprocess
    import sys

    from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd

    env = dict(mpi_env(), COLLECTIVES_STAGE="0")
    proc = subprocess.run(mpirun_cmd(n) + [sys.executable, str(MPI_SCRIPTS / "torch_heap.py")], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == n, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in lines:
        assert r["nfail"] == 0 and r["cases"] == 60, r["failures"]
        assert r["paths"] and all(p.startswith("direct") for p in r["paths"]) and r["located"], r
        assert "is not a ringzero process group" in r["refused"]


def test_the_cpp_calls_are_built_for_this_torch():
    """make venv builds csrc/torch_lane.cpp for the installed torch; it loads, and says which torch."""
    from collectives.torch_backend import native

    mod = native.load()
    assert mod is not None, "not built: python -m collectives.torch_backend.build"
    assert mod.TORCH_VERSION == torch.__version__
    assert {mod.TorchCall(k, None, print, native, (), KeyError, str).kind for k in range(4)} == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="kind 4"):
        mod.TorchCall(4, None, print, native, (), KeyError, str)


@pytest.mark.parametrize("off", [False, True])
def test_blocking_calls_through_the_cpp_calls(monkeypatch, off):
    """tests/mpi/torch_native.py on 2 ranks: dist.all_reduce, reduce_scatter, all_gather and
    broadcast repeated on the same tensors, fresh views and new tensors, exact against numpy,
    every repeat run by the lane from the C++ call; PREMUL_SUM, async and strided calls exact
    through the Python methods; a call one rank never makes raises DistBackendError ("Timed
    out") in about the timeout. With COLLECTIVES_TORCH_LANE=0 the same results, Python only."""
    from conftest import run_mpi

    if off:
        monkeypatch.setenv("COLLECTIVES_TORCH_LANE", "0")
    proc = run_mpi(2, "torch_native.py", *(["--off"] if off else []), timeout=300)
    out = _assert_all_ranks_ok(proc, 2)
    assert proc.stdout.count(f"native {not off}") == 2, out[-3000:]
    assert proc.stdout.count("timeout raised") == 1, out[-3000:]


# ---------------------------------------------------------------- the CUDA half
def _has_cuda():
    try:
        import cupy
        return torch.cuda.is_available() and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.skipif(not _has_cuda(), reason="needs torch with CUDA, cupy and a GPU")
def test_cuda_tensors_through_the_backend(mpi):
    """CUDA tensors under mpirun, 2 ranks sharing the GPU: every dtype and collective,
    torch's side stream, DDP and FSDP2 (tests/mpi/torch_cuda_check.py)."""
    proc = mpi(2, "torch_cuda_check.py", timeout=300)
    assert proc.returncode == 0 and "FAIL" not in proc.stdout, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.stdout.count("OK rank") == 2, proc.stdout[-3000:]


@pytest.mark.parametrize("mode", ["staged", "ipc", "cuda_aware"])
def test_process_group_over_the_fake_device_transport(mode):
    """The process group over Communicators whose bytes go through the device
    transport's protocols (test_cuda_transport's fake GPU backend, 3 ranks on
    threads): PREMUL_SUM, AVG, list forms with uneven pieces, strided tensors."""
    import numpy as np
    from test_cuda_transport import _run
    from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, BroadcastOptions, ReduceScatterOptions

    from collectives.torch_backend.group import RingzeroProcessGroup

    world, n = 3, 1001

    def fn(comm):
        pg, r = RingzeroProcessGroup(comm), comm.rank
        x = torch.arange(n, dtype=torch.float32) % 97 * (r + 1)
        opts = AllreduceOptions()
        opts.reduceOp = torch.distributed._make_nccl_premul_sum(0.5)
        pg.allreduce([x], opts).wait()
        avg = torch.full((n,), 4.0 * r, dtype=torch.float64)
        opts = AllreduceOptions()
        opts.reduceOp = torch.distributed.ReduceOp.AVG
        pg.allreduce([avg], opts).wait()
        rs = torch.empty(5 + r, dtype=torch.int64)
        pg.reduce_scatter([rs], [[torch.full((5 + p,), r + p, dtype=torch.int64) for p in range(world)]],
                          ReduceScatterOptions()).wait()
        ag = [torch.zeros(4 + p, 2, dtype=torch.bfloat16)[:, 1] for p in range(world)]  # strided outputs
        pg.allgather([ag], [torch.full((4 + r,), float(r), dtype=torch.bfloat16)], AllgatherOptions()).wait()
        bc = torch.zeros(37, 3)[:, 2] + r
        opts = BroadcastOptions()
        opts.rootRank = world - 1
        fut = pg.broadcast([bc], opts).get_future()
        return x, avg, rs, ag, fut.wait()[0]

    results, backends = _run(world, mode, fn, chunk_bytes=256, small_bytes=64)
    base = np.arange(n, dtype=np.float32) % 97
    for r, (x, avg, rs, ag, bc) in enumerate(results):
        assert np.array_equal(x.numpy(), base * 0.5 * world * (world + 1) / 2)
        assert np.array_equal(avg.numpy(), np.full(n, 4.0 * (world - 1) / 2))
        assert rs.tolist() == [sum(q + r for q in range(world))] * (5 + r)
        for p in range(world):
            assert ag[p].float().tolist() == [float(p)] * (4 + p)
        assert bc.tolist() == [world - 1.0] * 37
    if mode != "cuda_aware":
        assert sum(backends[0].counts.values()) > 10  # the device protocol really carried the bytes
