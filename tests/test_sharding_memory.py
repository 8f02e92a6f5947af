"""memory_report() against the ZeRO paper's figures, and the Figure 1 row."""
from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from sharding import AdamW, ZeroOptimizer, estimate_memory
from collectives import simulate

UNITS, D = 10, 1024  # 10 units of 1024 x 1024 + 1024: 10.5M parameters


def test_estimate_formulas():
    psi, n = 1e9, 8
    assert estimate_memory(psi, n, 0)["total"] == 16 * psi
    assert estimate_memory(psi, n, 1)["total"] == 4 * psi + 12 * psi / n
    assert estimate_memory(psi, n, 2)["total"] == 2 * psi + 14 * psi / n
    assert estimate_memory(psi, n, 3)["total"] == 16 * psi / n
    with pytest.raises(ValueError):
        estimate_memory(psi, n, 4)


def test_figure_1_row():
    out = subprocess.run([sys.executable, "-m", "sharding.memory", "--params", "7.5e9", "--world", "64"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[2].split() == ["120", "GB", "31.4", "GB", "16.6", "GB", "1.9", "GB"]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_measured_matches_zero_estimate_10m_params_4_ranks(stage):
    """Mixed-precision AdamW (bfloat16 weights and gradients, float32 master and
    moments): every category within 5% of the paper's figure; the
    communication buffers are reported on their own."""
    def fn(comm):
        rng = np.random.default_rng(0)
        units = {f"u{i}": {"W": rng.standard_normal((D, D), dtype=np.float32),
                           "b": np.zeros(D, np.float32)} for i in range(UNITS)}
        opt = ZeroOptimizer(units, comm, stage, AdamW(lr=1e-3), param_dtype=ml_dtypes.bfloat16,
                            reduce_dtype=ml_dtypes.bfloat16)
        del units
        for name in reversed(list(opt.units)):
            with opt.gather(name) as p:
                assert p["W"].dtype == ml_dtypes.bfloat16 and p["W"].shape == (D, D)
            opt.reduce_grads(name, {"W": np.full((D, D), 1e-3, np.float32), "b": np.zeros(D, np.float32)})
        opt.step()
        return opt.memory_report()
    reports = simulate(4, fn)
    est = estimate_memory(UNITS * (D * D + D), 4, stage)
    for rep in reports:
        for cat in ("weights", "gradients", "master", "optimizer"):
            assert abs(rep[cat] - est[cat]) <= 0.05 * est[cat], (cat, rep[cat], est[cat])
        assert abs((rep["total"] - rep["comm"]) - est["total"]) <= 0.05 * est["total"]
        assert rep["total"] == sum(rep[c] for c in ("weights", "gradients", "master", "optimizer", "comm"))
    r = reports[0]
    print(f"\nstage {stage}: measured {r['total'] - r['comm']:,} B + comm {r['comm']:,} B; "
          f"estimate {est['total']:,.0f} B")


def test_stage3_report_counts_the_gathered_unit_in_use_and_the_trace():
    """Inside ``with gather`` the gathered unit (the stage-3 peak) is in
    "weights"; the tracer's records show up in the comm parts."""
    from collectives.teach.trace import Tracer

    def fn(comm):
        units = {f"u{i}": {"W": np.ones((30, 41), np.float32)} for i in range(3)}
        opt = ZeroOptimizer(units, comm, 3, AdamW(), prefetch=False)
        before = opt.memory_report()
        with opt.gather("u1"):
            inside = opt.memory_report()
        after = opt.memory_report()
        return before, inside, after, opt.units["u1"].layout.padded * 4
    for before, inside, after, gathered in simulate(2, fn, tracer=Tracer()):
        assert inside["weights"] - before["weights"] == gathered
        assert after["weights"] == before["weights"]
        assert inside["comm_parts"]["trace"] > 0 and inside["comm_parts"]["scratch"] > 0
        assert inside["comm"] == sum(inside["comm_parts"].values())


@pytest.mark.parametrize("args", [["--params", "1e9", "--world", "0"], ["--params", "-5", "--world", "2"]])
def test_memory_tool_refuses_bad_figures_in_one_line(args):
    p = subprocess.run([sys.executable, "-m", "sharding.memory", *args], capture_output=True, text=True)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "--world" in p.stderr, p.stderr


def test_communicator_memory_counts_the_symmetric_heaps_own_windows():
    """Issue 11 #10: what the communicator holds for itself is in the report; the heap's
    scratch (a 160 KB direct all-reduce into a private out needs 160 KB of it) is counted,
    the caller's own heap array is not."""
    import json

    from conftest import run_mpi
    proc = run_mpi(3, "memory_symmetric.py", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2]
    for r in rows:
        assert r["ok"]
        assert r["before"] == {"scratch": 0, "symmetric": 0}
        assert r["after_alloc"]["symmetric"] < 160000          # the caller's 160 KB array is not ours
        assert r["after_call"]["symmetric"] >= 160000 + r["after_alloc"]["symmetric"]
