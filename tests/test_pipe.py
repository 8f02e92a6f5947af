"""The pipe: large staged all-reduces and all-gathers pipelined through shared
memory (collectives/symmetric/pipe.py, csrc/pipe.c).

The C loop is checked here with ranks as threads of one process (it runs
without the GIL), against numpy: many chunks, slots reused, counters carried
across calls, and a peer that stops (the wait returns at the deadline naming
it). Under mpirun (tests/mpi/pipe_check.py): every dtype and op at 2-5 ranks,
which sizes take the pipe by default, and a mismatch.
"""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd

fastpath = pytest.importorskip("collectives._fastpath", reason="the C extension was not built (no C compiler)")

DTYPES = {d: fastpath.DTYPES[np.dtype(d).name] for d in (np.float32, np.float64, np.int32, np.int64)}
C, D = 1024, 3  # small chunks, three slots: many steps and slot reuse from small arrays


class Node:
    """What pipe.py sets up on a node, in one process: per rank a pipe window and
    a control slot whose words 1-3 are the step counters."""

    def __init__(self, n):
        self.n = n
        self.windows = [np.zeros((n + 1) * D * C, np.uint8) for _ in range(n)]
        self.slots = [np.zeros(8, np.int64) for _ in range(n)]
        self.seq = 0

    def desc(self, kind, r, x, out, counts, dtype=np.float32, op=0, own=1):
        isz = 1 if kind else np.dtype(dtype).itemsize
        offs = np.cumsum([0] + list(counts[:-1])).tolist()
        head = [kind, self.n, r, x.ctypes.data, out.ctypes.data, isz, DTYPES.get(dtype, 0), op, C, D, own, 0]
        assert len(head) == fastpath.PIPE_HEAD
        return np.array(head + [w.ctypes.data for w in self.windows] + [s.ctypes.data + 8 for s in self.slots]
                        + offs + list(counts), np.int64)

    def run(self, descs, timeout=10.0, ranks=None):
        """Every rank's pipe call on its own thread; returns the return codes."""
        rcs = [None] * self.n
        deadline = time.monotonic() + timeout

        def one(r):
            rcs[r] = fastpath.pipe(descs[r].ctypes.data, self.seq, deadline, 0.001, 2e-3, 200e-6)

        threads = [threading.Thread(target=one, args=(r,)) for r in (ranks if ranks is not None else range(self.n))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return rcs


def _segments(count, n, itemsize):
    """allreduce.segments: whole 64-byte lines per segment, the rest on the last ones."""
    from collectives.symmetric.allreduce import segments as _counts
    return _counts(count, n, np.dtype({4: np.float32, 8: np.float64}[itemsize]))


@pytest.mark.parametrize("n", [2, 3])
def test_pipe_all_reduce_and_all_gather_match_numpy(n):
    node, rng = Node(n), np.random.default_rng(3)
    for call, (dtype, count) in enumerate([(np.float32, 5000), (np.int64, 1), (np.float64, 3001), (np.int32, 777),
                                           (np.float32, 0), (np.int64, 4096)]):
        for op, f in ((0, np.sum), (1, np.prod), (2, np.max), (3, np.min)):
            if op >= 2 and np.dtype(dtype).kind == "f":
                continue  # float max/min stay in numpy (pipe.piped)
            xs = [rng.integers(-4, 5, count).astype(dtype) if op != 1 else rng.choice([-1, 1, 2], count).astype(dtype)
                  for _ in range(n)]
            outs = [np.full(count, -99, dtype) for _ in range(n)]
            counts = _segments(count, n, np.dtype(dtype).itemsize)
            k_all = max((c + C // np.dtype(dtype).itemsize - 1) // (C // np.dtype(dtype).itemsize) for c in counts)
            inplace = call % 2 == 1
            if inplace:
                outs = [x for x in xs]
                want = f(np.stack([x.copy() for x in xs]), axis=0).astype(dtype)
            else:
                want = f(np.stack(xs), axis=0).astype(dtype)
            descs = [node.desc(0, r, xs[r], outs[r], counts, dtype, op) for r in range(n)]
            assert node.run(descs) == [0] * n
            node.seq += k_all
            for r in range(n):
                assert outs[r].tobytes() == want.tobytes(), (n, dtype, count, op, r)
        # an all-gather of uneven pieces (bytes), some empty
        pieces = [rng.integers(0, 255, (count + 37 * q) if q != 1 else 0).astype(np.uint8) for q in range(n)]
        counts = [p.size for p in pieces]
        outs = [np.zeros(sum(counts), np.uint8) for _ in range(n)]
        descs = [node.desc(1, r, pieces[r], outs[r], counts) for r in range(n)]
        assert node.run(descs) == [0] * n
        node.seq += max((c + C - 1) // C for c in counts)
        for r in range(n):
            assert outs[r].tobytes() == np.concatenate(pieces).tobytes()
    assert all(int(s[1]) == int(s[2]) == int(s[3]) == node.seq for s in node.slots)  # every counter at every step


def test_pipe_wait_returns_at_the_deadline_naming_the_peer():
    """Rank 1 never comes: rank 0 stages chunk 0, then its wait for rank 1's staged
    chunk reaches the deadline; the code names rank 1 and the step, the descriptor
    the chunk."""
    node = Node(2)
    x, out = np.arange(4000, dtype=np.float32), np.zeros(4000, np.float32)
    desc = node.desc(0, 0, x, out, _segments(4000, 2, 4))
    t = time.monotonic()
    rc = node.run([desc, None], timeout=0.3, ranks=[0])[0]
    assert 0.3 <= time.monotonic() - t < 5
    q, step = divmod(rc - 1, 3)
    assert (q, step, int(desc[11])) == (1, 0, 0)  # rank 1, 'chunk staged', chunk 0
    assert int(node.slots[0][1]) == 1  # rank 0 had staged its first chunk


def _pipe_mpi(n, mode, forced=True, timeout=240, **extra):
    env = dict(mpi_env())
    for k in ("COLLECTIVES_STAGE", "COLLECTIVES_PIPE_MIN", "COLLECTIVES_PIPE_CHUNK", "COLLECTIVES_PIPE"):
        env.pop(k, None)
    if forced:
        env.update(COLLECTIVES_STAGE="1", COLLECTIVES_PIPE_MIN="1", COLLECTIVES_PIPE_CHUNK="4096")
    env.update(extra)
    proc = subprocess.run(mpirun_cmd(n) + [sys.executable, str(MPI_SCRIPTS / "pipe_check.py"), mode],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == n, proc.stdout[-3000:] + proc.stderr[-3000:]
    return lines


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_pipe_grid_matches_numpy(n):
    for res in _pipe_mpi(n, "grid"):
        assert res["nfail"] == 0, res["failures"]
        assert res["cases"] > 300 and res["piped_steps"] > 1000


def test_pipe_default_sizes_on_two_ranks():
    """Automatic staging with the default tuning (pipe_min_* 0: never): all-reduces and
    all-gathers read in place (the staged-ring's all-reduces where the kernel forbids it), at
    every size; exact."""
    for res in _pipe_mpi(2, "default", forced=False):
        assert res["nfail"] == 0, res["failures"]
        assert res["pipe_min"] == {"all_reduce": 0, "all_gather": 0}
        ar = "direct" if res["cma"] else "staged-ring"
        assert res["roads"] == {"all_reduce 16777216": ar, "all_reduce 33554432": ar,
                                "all_reduce 67108864": ar, "all_gather 16777216": "direct",
                                "all_gather 33554432": "direct", "all_gather 67108864": "direct"}, res["roads"]


def test_pipe_where_its_threshold_is_set():
    """COLLECTIVES_PIPE_MIN=32 MiB (as a tuning file from bench/tune.py sets it where the pipe
    wins): automatic staging takes the pipe from that size, reads in place below; exact."""
    for res in _pipe_mpi(2, "default", forced=False, COLLECTIVES_PIPE_MIN=str(32 << 20)):
        assert res["nfail"] == 0, res["failures"]
        assert res["pipe_min"] == {"all_reduce": 32 << 20, "all_gather": 32 << 20}
        ar = "direct" if res["cma"] else "staged-ring"
        assert res["roads"] == {"all_reduce 16777216": ar, "all_reduce 33554432": "pipe",
                                "all_reduce 67108864": "pipe", "all_gather 16777216": "direct",
                                "all_gather 33554432": "pipe", "all_gather 67108864": "pipe"}, res["roads"]


def test_pipe_mismatch_raises_on_every_rank_before_any_chunk_moves():
    for res in _pipe_mpi(3, "mismatch"):
        assert res["nfail"] == 0, res["failures"]
        assert "count differs (rank 0: 50000, rank 1: 50000, rank 2: 50007)" in res["message"]
