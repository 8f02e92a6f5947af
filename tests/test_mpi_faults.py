"""Mismatched calls fail on every rank with a clear message; lost peers time out with names."""
import json

import pytest

from conftest import run_mpi


def _per_rank(proc, n):
    res = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            res[d["rank"]] = d
    assert sorted(res) == list(range(n)), proc.stdout + proc.stderr[-3000:]
    return res


@pytest.mark.parametrize("case,n,words", [
    ("count", 3, ["count differs", "rank 2: 9999", "rank 0: 10000"]),
    ("op", 2, ["op differs", "rank 1: max", "rank 0: sum"]),
    ("dtype", 3, ["dtype differs", "rank 0: float64", "rank 1: float32"]),
    ("order", 4, ["collective differs", "rank 0: all_gather", "rank 1: all_reduce"]),
    ("gather_counts", 2, ["count differs", "need counts="]),
    # a header message with a payload meets a barrier's receive; ranks built with another small_bytes
    ("barrier_vs_small", 2, ["collective differs", "rank 0: all_reduce", "rank 1: barrier"]),
    ("barrier_vs_small", 3, ["collective differs", "rank 2: barrier"]),
    ("small_bytes", 2, ["small differs", "rank 0: 262144", "rank 1: 4096"]),
    ("small_bytes", 3, ["small differs", "rank 2: 4096"]),
])
def test_mismatch_fails_on_every_rank(case, n, words):
    _assert_mismatch_everywhere(case, n, words)


def _assert_mismatch_everywhere(case, n, words):
    """Every rank of ``faults.py case`` raised MismatchError naming itself and ``words``."""
    proc = run_mpi(n, "faults.py", case, "20", timeout=120)
    res = _per_rank(proc, n)
    for r, d in res.items():
        assert d["error"] == "MismatchError", d
        assert f"rank {r}:" in d["message"]
        for w in words:
            assert w in d["message"], (w, d["message"])
    return res


@pytest.mark.parametrize("case,n,words", [
    ("ring_count", 2, ["count differs", "rank 1: 262080", "rank 0: 262144"]),
    ("ring_count", 3, ["count differs", "rank 2: 262080"]),
    ("ring_op", 3, ["op differs", "rank 0: max", "rank 1: sum"]),
    ("ring_gather", 2, ["count differs", "need counts="]),
    ("ring_gather", 3, ["count differs", "need counts="]),
])
def test_mismatch_after_data_was_posted(case, n, words):
    """The ring posts its first sends before the header verdict: a mismatch must still
    raise the same error on every rank, write nothing past any output (Open MPI's
    shared-memory transport writes a truncated message's excess past the receive
    buffer, so no receive may be posted before the verdict), and leave nothing
    behind for the next communicator."""
    for d in _assert_mismatch_everywhere(case, n, words).values():
        assert d["fresh_ok"] is True, d
        assert d["guard"] == 0, d


def test_timeout_names_the_absent_peer():
    proc = run_mpi(3, "faults.py", "absent", "1.5", timeout=120)
    res = _per_rank(proc, 3)
    for r in (0, 2):
        assert res[r]["error"] == "CollectiveTimeout", res[r]
        assert f"rank {r}:" in res[r]["message"] and "timed out after 1.5 s" in res[r]["message"]
    # rank 1's partners in the header exchange wait for it by name
    assert any("rank 1 never completed" in res[r]["message"] for r in (0, 2)), res
    assert "agreement" in res[0]["message"]


def test_timeout_mid_ring_names_step_and_chunk():
    proc = run_mpi(2, "faults.py", "drop", "1.5", timeout=120)
    res = _per_rank(proc, 2)
    msg = res[0]["message"]
    assert res[0]["error"] == "CollectiveTimeout", res[0]
    assert "rank 0:" in msg and "from rank 1" in msg and "step 0" in msg and "chunk 0" in msg, msg


def test_a_late_peer_writes_nothing_after_the_timeout():
    """Rank 1 stalls past the deadline, then sends. The ranks that timed out have
    cancelled every receive they posted: the late bytes land nowhere (before, the
    general ring's all-gather left its other receives posted into ``out``)."""
    proc = run_mpi(3, "faults.py", "late", "1.0", timeout=120)
    res = _per_rank(proc, 3)
    assert res[2]["error"] == "CollectiveTimeout" and "from rank 1" in res[2]["message"], res[2]
    for d in res.values():  # ranks 0 and 1 may finish or time out, depending on timing
        assert d["late_writes"] == 0, d


def test_communicator_unusable_after_error():
    proc = run_mpi(2, "faults.py", "after_error", "20", timeout=120)
    for r, d in _per_rank(proc, 2).items():
        assert d["error"] == "MismatchError"
        assert "unusable after an earlier error" in d["second"], d


@pytest.mark.parametrize("n,seed", [(2, 1), (3, 2), (4, 3)])
def test_random_mismatches_fail_everywhere_and_write_nothing_past_outputs(n, seed):
    """60 random one-field mismatches (tests/mpi/mismatch_fuzz.py) across the small
    path, the two-rank exchange and the chunked ring: MismatchError on every rank,
    no hang, and a guard region behind every output left untouched."""
    proc = run_mpi(n, "mismatch_fuzz.py", str(seed), "60", timeout=240)
    res = _per_rank(proc, n)
    for d in res.values():
        assert d["cases"] == 60 and d["failures"] == [], d["failures"][:5]


def test_small_path_bits_and_cancel_outcome():
    """tests/mpi/runtime_checks.py: small-path max/min leave the same bits on every
    rank (signed zeros, NaN payloads), and MpiTransport.cancel completes each
    request and says which receive had already matched. Three ranks: a pair
    exchange (ranks 0 and 1) and a fold (rank 2 into rank 0) in one launch."""
    n = 3
    proc = run_mpi(n, "runtime_checks.py", timeout=120)
    for d in _per_rank(proc, n).values():
        assert d["failures"] == [], d["failures"]


@pytest.mark.parametrize("n,absent", [(3, 2)])
def test_every_rank_names_the_rank_that_never_arrived(n, absent):
    """With one rank absent, the others wait on different peers (in 3 ranks, rank 1
    waits on rank 0, which waits on rank 2). After the timeout the live ranks
    swap notices of which collective each is in (collectives/census.py), so
    every one of them names the absent rank, and only it."""
    proc = run_mpi(n, "faults.py", "absent_rank", "1.5", str(absent), timeout=120)
    res = _per_rank(proc, n)
    for r in range(n):
        if r == absent:
            continue
        msg = res[r]["message"]
        assert res[r]["error"] == "CollectiveTimeout", res[r]
        assert f"rank {r}:" in msg and "timed out after 1.5 s" in msg, msg
        assert f"rank {absent} never arrived in all_reduce #1" in msg, msg
        others = [q for q in range(n) if q != absent]
        assert f"ranks {', '.join(map(str, others))} are in all_reduce #1" in msg, msg
