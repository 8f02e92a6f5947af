"""Real mpirun jobs: every collective, dtype and op at n = 1..5, exact against numpy and MPI."""
import json

import pytest

from conftest import run_mpi


def _results(proc):
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    return lines


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_grid_matches_numpy_and_mpi(n):
    proc = run_mpi(n, "check_collectives.py", timeout=300)
    res = _results(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["rank"] for r in res) == list(range(n)), proc.stdout + proc.stderr[-2000:]
    for r in res:
        assert r["nfail"] == 0, f"rank {r['rank']}: {r['nfail']} failures, e.g. {r['failures']}"
        assert r["cases"] > 2500  # the grid really ran


@pytest.mark.parametrize("n,seed", [(2, 1), (3, 2), (4, 3)])
def test_random_calls_match_mpi(n, seed):
    """400 seeded random calls (tests/mpi/call_fuzz.py): collective, dtype, op, size,
    uneven counts, in place, async with several in flight, four communicator
    settings; each result bit for bit equal to MPI's own collective's."""
    proc = run_mpi(n, "call_fuzz.py", str(seed), "400", timeout=300)
    res = _results(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["rank"] for r in res) == list(range(n)), proc.stdout + proc.stderr[-2000:]
    for r in res:
        assert r["calls"] == 400 and r["failures"] == [], r["failures"][:5]
