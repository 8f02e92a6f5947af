"""collectives/volumes.py: the byte formulas against the bytes the real ring sends (traced, simulated ranks)."""
from __future__ import annotations

import pytest

from collectives.teach import explain
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


def test_direct_volumes_closed_forms_and_balance():
    """Direct reads: even split, each rank reads what the ring would receive (all-reduce
    2(N-1)/N B, reduce-scatter and all-gather (N-1)/N B); what ranks read equals what
    their peers' buffers give, for uneven segments too; one phase reads (N-1) B."""
    from collectives.volumes import direct_volumes
    for n in (2, 3, 4, 8):
        b = 4 * 8 * n
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            vols = direct_volumes(op, [8] * n, 4)
            assert all(v.received == even_bytes_sent(op, b, n) for v in vols), (op, n)
        assert all(v.received == v.sent == (n - 1) * b for v in direct_volumes("all_reduce", [8] * n, 4,
                                                                              one_phase=True))
    for op in OPS:
        for counts in ([3, 0, 7], [1, 2, 3, 4], [0, 5]):
            vols = direct_volumes(op, counts, 2, root=1)
            assert sum(v.sent for v in vols) == sum(v.received for v in vols), (op, counts)
    bc = direct_volumes("broadcast", [4, 4, 4], 4, root=2)
    assert [(v.sent, v.received) for v in bc] == [(0, 48), (0, 48), (96, 0)]
    assert direct_volumes("all_gather", [5], 4) == [(0, 0, "N = 1: nothing", "N = 1: nothing")]
    with pytest.raises(ValueError):
        direct_volumes("broadcast", [1, 1], 4, root=2)


def test_memory_roofline_counts_each_input_read_once_and_each_output_written_once():
    """What memory of bandwidth M allows each collective's busbw within a node:
    all-reduce M(N-1)/N^2 (M/4 on two ranks), reduce-scatter and all-gather
    M(N-1)/(N(N+1)), broadcast M/N; derived here from the traffic, not the formula."""
    from collectives.volumes import busbw_factor, least_memory_bytes, memory_roofline
    m = 20.0
    for n in (2, 3, 4, 8):
        traffic = {"all_reduce": n * 1.0 + n * 1.0,  # n inputs of B read, n outputs of B written
                   "reduce_scatter": n * 1.0 + n * (1.0 / n),  # n inputs of B, n outputs of B/N
                   "all_gather": n * (1.0 / n) + n * 1.0,  # n pieces of B/N, n outputs of B
                   "broadcast": 1.0 + (n - 1) * 1.0}  # the root's buffer read, n - 1 copies written
        for op, t in traffic.items():
            assert abs(least_memory_bytes(op, 1.0, n) - t) < 1e-12, (op, n)
            assert abs(memory_roofline(op, n, m) - m * busbw_factor(op, n) / t) < 1e-12, (op, n)
    assert memory_roofline("all_reduce", 2, m) == m / 4
    assert abs(memory_roofline("all_gather", 2, m) - m / 6) < 1e-12
