"""Errors in the sharding layer reach the caller as what they are: a failed
stage-3 gather raises the collective's own error, not a cleanup error."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from collectives import CollectiveError, simulate
from sharding import AdamW, ZeroOptimizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from model import init_units  # noqa: E402

SIZES = [6, 20, 13, 5]


@pytest.mark.parametrize("prefetch", [False, True])
def test_stage3_gather_raises_the_collective_error(prefetch):
    """Rank 1 never gathers: rank 0's gather must raise CollectiveError (a
    timeout or a closed peer), not 'released while still in flight'."""
    def fn(comm):
        opt = ZeroOptimizer(init_units(SIZES), comm, 3, AdamW(), prefetch=prefetch)
        if comm.rank == 0:
            with opt.gather("layer0"):
                pass
    errors = simulate(2, fn, timeout=1.0, return_exceptions=True)
    assert errors[1] is None
    assert isinstance(errors[0], CollectiveError), repr(errors[0])
    assert "released while still in flight" not in str(errors[0])
