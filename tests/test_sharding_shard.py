"""Shard arithmetic, checked exhaustively on small cases without any process."""
from __future__ import annotations

import numpy as np
import pytest

from sharding.shard import (ALIGN, ShardInfo, layout_unit, overlap, padded_numel, params_in_shard,
                            round_up, shard_range)

WORLDS = [1, 2, 3, 4, 5, 7, 8, 16]


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("numel", [0, 1, 15, 16, 17, 100, 1000, 4099])
def test_padding_policy(world, numel):
    p = padded_numel(numel, world)
    assert p >= max(numel, 1) and p % (world * ALIGN) == 0
    assert p - max(numel, 1) < world * ALIGN  # the smallest such length
    shards = [shard_range(p, world, r) for r in range(world)]
    assert shards[0].offset == 0 and shards[-1].end == p
    for a, b in zip(shards, shards[1:]):
        assert a.end == b.offset and a.size == b.size
    assert all(s.offset % ALIGN == 0 for s in shards)


def test_shard_range_refuses_bad_input():
    with pytest.raises(ValueError, match="pad it first"):
        shard_range(10, 3, 0)
    with pytest.raises(ValueError):
        shard_range(12, 3, 3)
    with pytest.raises(ValueError):
        padded_numel(5, 0)


SHAPES = [("W", (5, 7)), ("b", (7,)), ("s", ()), ("E", (3, 11))]


def test_layout_aligns_each_param_and_is_world_independent():
    lays = [layout_unit("u", SHAPES, w) for w in WORLDS]
    for lay in lays:
        assert [s.name for s in lay.slots] == ["W", "b", "s", "E"]
        assert [s.offset for s in lay.slots] == [0, 48, 64, 80]
        assert all(s.offset % ALIGN == 0 for s in lay.slots)
        assert lay.num_params == 35 + 7 + 1 + 33 and lay.numel == 113
        assert lay.padded == padded_numel(113, lay.world)


@pytest.mark.parametrize("world", WORLDS)
def test_params_in_shard_cover_every_element_exactly_once(world):
    lay = layout_unit("u", SHAPES, world)
    seen = {s.name: np.zeros(s.numel, int) for s in lay.slots}
    for r in range(world):
        sh = lay.shard(r)
        for slot, lo, hi in params_in_shard(lay, sh):
            assert sh.offset <= slot.offset + lo < slot.offset + hi <= sh.end
            seen[slot.name][lo:hi] += 1
    assert all((v == 1).all() for v in seen.values())


def test_a_parameter_may_straddle_ranks():
    lay = layout_unit("u", [("W", (100,))], 4)  # 100 -> padded 128, shards of 32
    pieces = [params_in_shard(lay, lay.shard(r)) for r in range(4)]
    assert [(p[0][1], p[0][2]) for p in pieces] == [(0, 32), (32, 64), (64, 96), (96, 100)]


def test_overlap_and_round_up():
    assert overlap(ShardInfo(0, 10), ShardInfo(5, 10)) == ShardInfo(5, 5)
    assert overlap(ShardInfo(0, 5), ShardInfo(5, 10)) is None
    assert [round_up(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8]
