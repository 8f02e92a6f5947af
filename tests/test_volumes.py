"""collectives/volumes.py: the byte formulas against the bytes the real ring sends (traced, simulated ranks)."""
from __future__ import annotations

import pytest

from collectives import explain
from collectives.volumes import busbw_factor, even_bytes_sent, ring_volumes, zero_volume

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]


@pytest.mark.parametrize("op", OPS)
def test_ring_volumes_match_the_trace(op):
    """Every rank's traced sent/received bytes equal the formula, even and uneven (empty) segments."""
    for counts in ([5], [4, 4], [3, 0, 7], [1, 2, 3, 4], [8, 8, 8, 8, 8], [0, 0, 1]):
        for dtype, item in (("float32", 4), ("float64", 8)):
            n = len(counts)
            root = sum(counts) % n
            run = explain.run(op, n, sum(counts), counts=counts, dtype=dtype, root=root, chunk=2)
            got = run.tracer.totals()
            for r, v in enumerate(ring_volumes(op, counts, item, root)):
                g = got.get(r, {"sent": 0, "recv": 0})
                assert (g["sent"], g["recv"]) == (v.sent, v.received), (op, counts, dtype, r, v)


@pytest.mark.parametrize("op", OPS[:3])
def test_even_split_sends_busbw_factor_times_b(op):
    """For an even split every rank sends and receives exactly busbw factor x B (nccl-tests' definition)."""
    for n in range(1, 7):
        counts = [6] * n
        b = 6 * n * 4
        want = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n}[op]
        assert busbw_factor(op, n) == pytest.approx(want)
        assert even_bytes_sent(op, b, n) == pytest.approx(want * b)
        for v in ring_volumes(op, counts, 4):
            assert v.sent == v.received == round(want * b)


def test_broadcast_factor_and_errors():
    assert busbw_factor("broadcast", 5) == 1.0
    vols = ring_volumes("broadcast", [3, 3, 3], 4, root=1)
    assert [(v.sent, v.received) for v in vols] == [(0, 36), (36, 0), (36, 36)]  # rank 0 ends the chain
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("all_to_all", 2)
    with pytest.raises(ValueError, match="root"):
        ring_volumes("broadcast", [1, 1], 4, root=2)


def test_zero_volume_from_the_factors():
    assert zero_volume(1000, 4, 0, 4, 4) == 2 * 0.75 * 1000 * 4
    assert zero_volume(1000, 4, 1, 2, 4) == 0.75 * 1000 * (4 + 2)
    assert zero_volume(1000, 4, 3, 2, 4) == 0.75 * 1000 * (4 + 4)
    with pytest.raises(ValueError):
        zero_volume(1000, 4, 4, 2, 4)
