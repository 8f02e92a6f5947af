"""The lane (collectives/fast/lane.py, csrc/lane.c): calls found by what their arrays are.

Fresh views, new arrays and torch views of ordinary buffers, on 2 and 3 ranks
(staging on where the default does not stage), run in C from their first line
after a first call in Python; every result exact, the table bounded, and a
mismatch after many lane calls still raised on every rank
(tests/mpi/lane_check.py)."""
import json
import subprocess
import sys

import pytest

from collectives.plan_cache import MAX_PLANS
from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd

pytest.importorskip("collectives._fastpath")


def _run(n, mode):
    env = dict(mpi_env())
    env.pop("COLLECTIVES_STAGE", None)
    if n != 2:
        env["COLLECTIVES_STAGE"] = "1"  # the default stages ordinary arrays on two ranks only
    proc = subprocess.run(mpirun_cmd(n) + [sys.executable, str(MPI_SCRIPTS / "lane_check.py"), mode],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == n, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(lines, key=lambda r: r["rank"])


@pytest.mark.parametrize("n", [2, 3])
def test_fresh_views_run_in_c_after_the_first_call(n):
    """x[:] and out[:] every call: each result exact and out itself returned; every call after
    a shape's first ran to the end in C from the lane, on a direct road."""
    for r in _run(n, "fresh"):
        assert r["nfail"] == 0, r["failures"]
        assert r["cases"] == 3 * 6 * 5, r
        assert r["later_in_c"] == r["later_calls"], r
        assert r["direct"], r


def test_new_arrays_run_relocated_programs_and_the_table_stays_bounded():
    """A ring of buffers: arrays at addresses the lane never saw run their shape's program,
    relocated; 300 calls over 24 shapes in fresh arrays keep at most 64 entries, 16
    templates and the plan cache's MAX_PLANS plans."""
    for r in _run(2, "new"):
        assert r["nfail"] == 0, r["failures"]
        assert r["relocated"] >= 7 and r["runs"] >= 14, r
        assert r["most"]["entries"] <= 64 and r["most"]["templates"] <= 16 and r["most"]["plans"] <= MAX_PLANS, r


@pytest.mark.parametrize("n", [2, 3])
def test_programs_written_for_neighbouring_x_and_out_relocate_each_apart(n):
    """A shape's first call with out right after x in one buffer (out's first byte is x's
    end): its programs, relocated for new arrays, write only into the new out, exact."""
    for r in _run(n, "neighbours"):
        assert r["nfail"] == 0, r["failures"]
        assert r["relocated"] >= 8, r


def test_torch_views_run_in_c():
    pytest.importorskip("torch")
    for r in _run(2, "torch"):
        assert r["nfail"] == 0, r["failures"]
        assert r["later_in_c"] == 12, r


def test_a_mismatch_after_lane_calls_is_raised_on_every_rank():
    for r in _run(2, "mismatch"):
        assert r["nfail"] == 0, r["failures"]
        assert r["runs_before"] == 19, r
        assert "op differs" in r["mismatch"], r
