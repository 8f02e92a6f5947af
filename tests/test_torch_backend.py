"""The torch.distributed backend "ringzero": dist.* collectives, training, CUDA.

One mpirun launch per world size runs the whole dist.* matrix
(tests/mpi/torch_collectives.py: every collective, dtype, op, size, async
and strided, exact against numpy, then a mismatched call that must raise on
every rank); one more launch trains DDP, FSDP2, HSDP and
ZeroRedundancyOptimizer against one-process training.
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")


def _assert_all_ranks_ok(proc, n):
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    oks = [line for line in proc.stdout.splitlines() if line.startswith("OK rank")]
    assert len(oks) == n, out[-6000:]
    return out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_dist_collectives_exact(mpi, n):
    proc = mpi(n, "torch_collectives.py", timeout=300)
    out = _assert_all_ranks_ok(proc, n)
    # the mismatched all_reduce raised on every rank, naming the disagreeing ranks
    raised = [line for line in proc.stdout.splitlines() if "mismatch raised" in line]
    assert len(raised) == n, out[-3000:]
    assert all("count differs (rank 0: 10, rank" in line for line in raised), raised


def test_training_matches_one_process(mpi):
    """DDP, ZeroRedundancyOptimizer, FSDP2 (resharding and not) and HSDP on a 2x2
    mesh, SGD+momentum and AdamW: 5 steps equal one-process training within 1e-6."""
    proc = mpi(4, "torch_train.py", timeout=300)
    out = _assert_all_ranks_ok(proc, 4)
    for case in ("ddp", "zero1", "fsdp2", "fsdp2-zero2", "hsdp"):
        for opt in ("sgd", "adamw"):
            assert out.count(f"PASS {case} {opt} ") == 4, (case, opt, out[-3000:])


def test_init_variants_and_trace(mpi, tmp_path):
    """A wrong world size fails at once; explicit rank/world_size, store and tcp://
    work; COLLECTIVES_TRACE records DDP's gradient all-reduces as ring traffic."""
    proc = mpi(2, "torch_init.py", str(tmp_path / "trace.json"), timeout=240)
    out = _assert_all_ranks_ok(proc, 2)
    for case in ("world_size mismatch", "explicit rank and world_size", "explicit store", "tcp init_method"):
        assert out.count(f"PASS {case}") == 2, (case, out[-3000:])
    for r in range(2):
        events = json.loads((tmp_path / f"trace.rank{r}.json").read_text())["traceEvents"]
        reduces = [e for e in events if e["name"].startswith("all_reduce") and e.get("ph") == "X"]
        assert reduces and sum(e["args"]["bytes_sent"] for e in reduces) > 4 * 64 * 64, events[:5]
