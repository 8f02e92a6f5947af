"""collectives/gpu_ring/plan.py: the kernels' schedule, checked exhaustively and against the host ring's.

Pure arithmetic, so every world size up to 16 is checked: the kernel's step t sends what
the host ring sends at its step t and receives what the host ring receives at step t-1
(collectives/host/schedule.py); channel parts tile every segment; the traffic formulas have
the closed forms ring.cu's header states.
"""
from __future__ import annotations

import numpy as np
import pytest

from collectives.gpu_ring import plan
from collectives.host import schedule


@pytest.mark.parametrize("world", range(2, 17))
def test_every_step_is_the_host_rings(world):
    for r in range(world):
        for t in range(world):
            rs, ag = plan.step("reduce_scatter", r, world, t), plan.step("all_gather", r, world, t)
            if t < world - 1:
                assert rs.send and rs.seg == schedule.reduce_scatter_step(r, world, t)[0]
                assert ag.send and ag.seg == schedule.all_gather_step(r, world, t)[0]
            if t > 0:
                assert rs.recv and rs.reduce and rs.seg == schedule.reduce_scatter_step(r, world, t - 1)[1]
                assert ag.recv and not ag.reduce and ag.seg == schedule.all_gather_step(r, world, t - 1)[1]
        ar = [plan.step("all_reduce", r, world, t) for t in range(2 * world - 1)]
        assert [s.seg for s in ar[:world]] == [plan.step("reduce_scatter", r, world, t).seg for t in range(world)]
        assert [s.seg for s in ar[world - 1:]] == [plan.step("all_gather", r, world, t).seg for t in range(world)]
        assert ar[world - 1].final and ar[world - 1].seg == r and ar[world - 1].send
        assert sum(s.final for s in ar) == 1 and not ar[0].recv and not ar[-1].send


@pytest.mark.parametrize("n,world,granule", [(0, 3, 16), (1, 4, 8), (100, 7, 16), (1000, 8, 4), (4097, 5, 32), (15, 16, 1)])
def test_split_counts_is_the_host_rings(n, world, granule):
    assert plan.split_counts is schedule.split_counts  # one split for the kernels and the host ring
    counts = plan.split_counts(n, world, granule)
    assert len(counts) == world and sum(counts) == n
    filled = [s for s in range(world) if counts[s]]
    last = filled[-1] if filled else 0
    assert all(c % granule == 0 for s, c in enumerate(counts) if s != last)
    units = [c // granule for c in counts]  # even: whole granules differ by at most one, earlier first
    assert max(units) - min(units) <= 1 and units == sorted(units, reverse=True)
    assert plan.offsets(counts) == [0] + list(np.cumsum(counts))


@pytest.mark.parametrize("world", [2, 3, 5, 8])
def test_each_segment_is_sent_once_per_link_and_received_by_everyone_else(world):
    for coll in plan.COLLECTIVES:
        last = plan.nsteps(coll, world) - 1
        for r in range(world):
            steps = [plan.step(coll, r, world, t) for t in range(last + 1)]
            received = [s.seg for s in steps if s.recv]
            assert len(received) == last
            if coll != "all_reduce":
                assert sorted(received) == sorted(set(range(world)) - {(r - 1) % world if coll == "reduce_scatter" else r})


@pytest.mark.parametrize("counts", [[0, 0, 0], [5, 0, 17], [1, 2, 3, 4, 100], [64] * 8, [1000, 3]])
@pytest.mark.parametrize("nch", [1, 2, 3, 7])
def test_channel_parts_tile_every_segment_in_whole_granules(counts, nch):
    offs = plan.offsets(counts)
    for s in range(len(counts)):
        parts = [plan.part(offs, s, c, nch, 4) for c in range(nch)]
        assert parts[0][0] == offs[s] and parts[-1][1] == offs[s + 1]
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        assert all((hi - lo) % 4 == 0 for lo, hi in parts[:-1])
    assert plan.messages("all_reduce", offs, nch, 4, 16) == [
        plan.rounds(offs, c, nch, 4, 4) * (2 * len(counts) - 2) for c in range(nch)]


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_traffic_has_the_closed_forms_of_the_kernels_header(world):
    u = 1024  # bytes per segment
    counts = [u // 4] * world
    for r in range(world):
        assert plan.traffic("all_reduce", counts, r, 4) == (2 * world * u, (6 * world - 4) * u)
        assert plan.traffic("all_reduce", counts, r, 4, direct=True) == (2 * world * u, (5 * world - 4) * u)
        assert plan.traffic("reduce_scatter", counts, r, 4) == ((world + 1) * u, (3 * world - 1) * u)
        assert plan.traffic("all_gather", counts, r, 4) == ((world + 1) * u, (3 * world - 1) * u)
        assert plan.traffic("all_gather", counts, r, 4, direct=True) == ((world + 1) * u, (2 * world - 1) * u)
        assert plan.traffic("all_gather", counts, r, 4, in_place=True) == (world * u, (3 * world - 2) * u)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        plan.step("broadcast", 0, 2, 0)
    with pytest.raises(ValueError):
        plan.step("all_reduce", 0, 2, 3)
    with pytest.raises(ValueError):
        plan.split_counts(-1, 2)
