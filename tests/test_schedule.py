"""The pure ring schedule, checked exhaustively for every world size up to 16."""
import pytest

from collectives.host.schedule import (Range, all_gather_step, chunks, halving_peers, offsets, reduce_scatter_step,
                                  split_counts)


@pytest.mark.parametrize("world", range(1, 17))
def test_reduce_scatter_schedule_reduces_every_contribution_once(world):
    # have[r][s] = set of ranks whose contribution rank r holds for segment s
    have = [[{r} for _ in range(world)] for r in range(world)]
    for step in range(world - 1):
        sent = {}
        for r in range(world):
            send, recv = reduce_scatter_step(r, world, step)
            sent[(r + 1) % world] = (send, set(have[r][send]))
        for r in range(world):
            seg, contrib = sent[r]
            _, recv = reduce_scatter_step(r, world, step)
            assert recv == seg, "receiver and sender disagree on the segment"
            assert not (have[r][seg] & contrib), "a contribution would be counted twice"
            have[r][seg] |= contrib
    for r in range(world):
        assert have[r][r] == set(range(world))


@pytest.mark.parametrize("world", range(1, 17))
def test_all_gather_schedule_delivers_every_segment(world):
    have = [{r} for r in range(world)]
    for step in range(world - 1):
        msgs = {}
        for r in range(world):
            send, recv = all_gather_step(r, world, step)
            assert send in have[r], "a rank forwards a segment it does not have yet"
            msgs[(r + 1) % world] = send
        for r in range(world):
            assert msgs[r] == all_gather_step(r, world, step)[1]
            have[r].add(msgs[r])
    assert all(h == set(range(world)) for h in have)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 16, 17, 100, 1001, 4099])
@pytest.mark.parametrize("world", [1, 2, 3, 5, 8, 16])
@pytest.mark.parametrize("granule", [1, 16])
def test_split_counts(n, world, granule):
    counts = split_counts(n, world, granule)
    assert len(counts) == world and sum(counts) == n and min(counts) >= 0
    # balanced to within one granule, plus the tail that is not a whole granule
    assert max(counts) - min(counts) <= granule + n % granule
    offs = offsets(counts)
    assert offs[0] == 0 and offs[-1] == n
    # every non-empty segment starts on a granule boundary (aligned vector loads)
    assert all(offs[s] % granule == 0 for s in range(world) if counts[s])
    assert all(offs[s + 1] - offs[s] == counts[s] for s in range(world))


@pytest.mark.parametrize("size,chunk", [(0, 3), (1, 3), (3, 3), (10, 3), (10, 100)])
def test_chunks_cover_the_range_in_order(size, chunk):
    cs = chunks(Range(5, 5 + size), chunk)
    assert sum(c.size for c in cs) == size
    assert all(0 < c.size <= chunk for c in cs)
    assert [c.start for c in cs] == list(range(5, 5 + size, chunk))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        chunks(Range(0, 4), 0)
    with pytest.raises(ValueError):
        split_counts(-1, 2)


@pytest.mark.parametrize("world", range(1, 17))
def test_recursive_doubling_pairs_are_symmetric(world):
    p, _ = halving_peers(0, world)
    assert p <= world < 2 * p
    for r in range(world):
        _, partners = halving_peers(r, world)
        for i, q in enumerate(partners):
            assert halving_peers(q, world)[1][i] == r
    assert 2 ** len(halving_peers(0, world)[1]) == p
