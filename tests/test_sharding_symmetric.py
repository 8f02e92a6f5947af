"""ZeroOptimizer with its communicated buffers in the symmetric heap (sharding/heap.py), under
mpirun: stages 0-3 train as with plain arrays, the collectives read peers directly, checkpoints
load (tests/mpi/zero_symmetric.py); in-process communicators keep plain numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

from collectives.teach.simulate import simulate
from conftest import run_mpi
from sharding import AdamW, ZeroOptimizer


@pytest.mark.parametrize("n", [2, 3])
def test_heap_buffers_train_like_plain_ones_and_read_peers_directly(tmp_path, n):
    p = run_mpi(n, "zero_symmetric.py", str(tmp_path / "ckpt"), timeout=240)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and len(lines) == n, p.stdout[-3000:] + p.stderr[-3000:]
    for res in lines:
        assert res["nfail"] == 0, res["failures"]
        assert res["cases"] == 97
        if n == 2:  # one addition per element: the same bits on either path
            assert res["exact"], res["maxdiff"]


def test_in_process_communicators_keep_numpy():
    units = {"a": {"W": np.ones((4, 4), np.float32)}}

    def body(comm):
        opt = ZeroOptimizer(units, comm, 2, AdamW(lr=1e-3))
        with pytest.raises(ValueError, match="symmetric=True needs a Communicator with a bootstrap"):
            ZeroOptimizer(units, comm, 2, AdamW(lr=1e-3), symmetric=True)
        return opt.symmetric, opt.reducer.pool

    assert simulate(2, body) == [(False, None)] * 2
