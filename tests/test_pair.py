"""The two-rank ring (collectives/pair.py): every segment and piece as one message.

Simulated ranks check results bit for bit against numpy, and count the data
messages: an untraced two-rank reduce-scatter, all-reduce or broadcast sends
each segment whole, whatever the chunk size (the chunk pipeline sent one message per chunk). One mpirun
launch (tests/mpi/pair_check.py) checks the same paths over real MPI, where a
receive posted too early would take bytes the peer has not read yet.
"""
import json
from collections import Counter

import numpy as np
import pytest

from collectives import simulate
from collectives.host import ring
from collectives.transport.inproc import InProcTransport
from conftest import run_mpi
from inputs import data

TINY = dict(chunk_bytes=16, small_bytes=0)  # the ring at every size, many chunks a segment
COUNTS = [0, 1, 2, 5, 13, 64, 1031]
RS_COUNTS = ([0, 0], [1, 0], [0, 7], [13, 5], [515, 516])
OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _want(count, dtype, op):
    a, b = (data(count, r, np.float64, op) for r in range(2))
    return OPS[op](a, b).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16", "bfloat16"])
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in-place"])
def test_two_rank_all_reduce_exact(dtype, in_place):
    import ml_dtypes  # noqa: F401  (bfloat16 as a numpy dtype)
    dt = np.dtype(dtype)
    for count in COUNTS:
        for op in OPS:
            def fn(c):
                x = data(count, c.rank, dt, op)
                if in_place:
                    c.all_reduce(x, op=op, out=x)
                    return x
                y = c.all_reduce(x, op=op)
                assert np.array_equal(x, data(count, c.rank, dt, op)), "input modified"
                return y
            for got in simulate(2, fn, **TINY):
                assert got.dtype == dt and np.array_equal(got, _want(count, dt, op)), (count, op)


def test_in_place_past_the_scratch_bound_goes_in_blocks(monkeypatch, tmp_path):
    """In place, a vector whose segments are larger than the tuning table's
    pair_inplace_bytes goes in blocks whose halves are that size (bounded scratch),
    each block as the two-rank exchange; out of place the same size still goes whole.
    The bound comes from a tuning file (RINGZERO_TUNING), as bench/tune.py writes them."""
    f = tmp_path / "tuning.json"
    f.write_text('{"values": {"pair_inplace_bytes": 64}}')
    monkeypatch.setenv("RINGZERO_TUNING", str(f))
    sent = _count_data_messages(monkeypatch)
    count = 1031  # segments of 512 and 519 float32: past 64 bytes

    def fn(c):
        x = data(count, c.rank, np.float32)
        y = c.all_reduce(x)
        c.all_reduce(x, out=x)
        return y, x

    for y, x in simulate(2, fn, **TINY):
        assert np.array_equal(y, _want(count, np.float32, "sum")) and np.array_equal(x, y)
    # out of place two messages a rank; in place two for each of the 32 blocks of 2 x 16 float32
    # (64-byte halves), and the last 7 elements as one segment: rank 1 sends them, rank 0 their sum
    assert sent == {r: 2 + 2 * 32 + 1 for r in range(2)}, sent


def _count_data_messages(monkeypatch) -> Counter:
    """Count each rank's ring data messages (not the header agreement's)."""
    sent = Counter()
    orig = InProcTransport.isend

    def isend(self, buf, peer, tag):
        if tag in (ring.TAG_DATA, ring.TAG_GATHER):
            sent[self.rank] += 1
        return orig(self, buf, peer, tag)

    monkeypatch.setattr(InProcTransport, "isend", isend)
    return sent


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in-place"])
def test_two_rank_all_reduce_sends_each_segment_whole(monkeypatch, in_place):
    """With 16-byte chunks the pipeline sent 2 x 65 messages a rank for 1031 float32;
    the two-rank path sends two: the peer's segment of x, then its own result."""
    sent = _count_data_messages(monkeypatch)
    count = 1031

    def fn(c):
        x = data(count, c.rank, np.float32)
        return c.all_reduce(x, out=x if in_place else None)

    for got in simulate(2, fn, **TINY):
        assert np.array_equal(got, _want(count, np.float32, "sum"))
    assert sent == {0: 2, 1: 2}


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_two_rank_reduce_scatter_exact_one_message_a_rank(monkeypatch, dtype):
    """Each rank sends its peer's segment whole (the pipeline: one message per 16-byte
    chunk) and reduces its own straight into out; uneven and empty segments too."""
    dt = np.dtype(dtype)
    sent = _count_data_messages(monkeypatch)
    for counts in RS_COUNTS:
        count = sum(counts)
        for op in OPS:
            want = _want(count, dt, op)

            def fn(c):
                x = data(count, c.rank, dt, op)
                y = c.reduce_scatter(x, op=op, counts=counts)
                assert np.array_equal(x, data(count, c.rank, dt, op)), "input modified"
                return y
            got = simulate(2, fn, **TINY)
            for r in range(2):
                lo = sum(counts[:r])
                assert np.array_equal(got[r], want[lo:lo + counts[r]]), (counts, op, r)
    # one message a call and rank, none where the peer's segment is empty
    assert sent == {r: len(OPS) * sum(1 for counts in RS_COUNTS if counts[1 - r]) for r in range(2)}, sent


def test_two_rank_broadcast_one_message(monkeypatch):
    """The root sends its buffer as one message (the chain: one per chunk), in place or not."""
    sent = _count_data_messages(monkeypatch)
    for root in (0, 1):
        for count in (0, 1, 1031):
            want = data(count, root, np.float64)

            def fn(c):
                x = data(count, c.rank, np.float64)
                y = c.broadcast(x, root=root)
                c.broadcast(x, root=root, out=x)
                return y, x
            for y, x in simulate(2, fn, **TINY):
                assert np.array_equal(y, want) and np.array_equal(x, want), (root, count)
    assert sent == {0: 4, 1: 4}, sent  # two calls a root, two non-empty sizes


def test_a_traced_two_rank_all_reduce_takes_the_same_road(monkeypatch):
    """Tracing never changes the road: a traced two-rank call is the pair's two messages,
    and the trace records them (and the road)."""
    from collectives.teach.trace import Tracer
    sent = _count_data_messages(monkeypatch)
    tracer = Tracer()
    got = simulate(2, lambda c: (c.all_reduce(data(100, c.rank, np.float32)), c.road_taken()), tracer=tracer, **TINY)
    assert all(np.array_equal(g, _want(100, np.float32, "sum")) and road.value == "pair" for g, road in got)
    assert sent == {r: 2 for r in range(2)}, sent
    assert set(tracer.roads().values()) == {"pair"}
    # the all-reduce's 2(n-1)/n of 400 bytes: the peer's half of x out, our reduced half back
    assert {r: t["sent"] for r, t in tracer.totals().items()} == {0: 400, 1: 400}


def test_two_rank_all_gather_uneven_in_place_and_empty():
    for counts in ([5, 0], [0, 7], [1031, 1], [64, 64]):
        want = np.concatenate([data(k, q, np.float32) for q, k in enumerate(counts)])
        total = sum(counts)

        def fn(c):
            x = data(counts[c.rank], c.rank, np.float32)
            out = c.all_gather(x, counts=counts)
            o = np.full(total, -99, np.float32)  # in place: x is this rank's own segment of o
            lo = sum(counts[:c.rank])
            o[lo:lo + counts[c.rank]] = x
            c.all_gather(o[lo:lo + counts[c.rank]], out=o, counts=counts)
            return out, o

        for out, o in simulate(2, fn, **TINY):
            assert np.array_equal(out, want) and np.array_equal(o, want), counts


def test_two_rank_paths_over_mpi():
    """Real MPI (rendezvous, single-copy transfers), one launch: the ring's two-rank
    all-reduce in and out of place, from a staging communicator (the ring above the
    staging limit) and one that never stages; all-gather pieces past the limit."""
    proc = run_mpi(2, "pair_check.py", timeout=180)
    lines = [json.loads(s) for s in proc.stdout.splitlines() if s.startswith("{")]
    assert proc.returncode == 0 and len(lines) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    for res in lines:
        assert res["failures"] == [] and res["cases"] >= 60, res
        assert res["counted"] == res["cases"], res  # every case sent what its path sends
