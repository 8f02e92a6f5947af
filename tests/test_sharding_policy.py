"""The per-stage policy: the table of what each ZeRO stage shards, and the
combinations that cannot work are refused."""
from __future__ import annotations

import pytest

from sharding.policy import StagePolicy, policy_for


def test_the_four_stages():
    got = {s: (p.shard_weights, p.shard_grads, p.shard_state) for s in range(4) for p in [policy_for(s)]}
    assert got == {0: (False, False, False), 1: (False, False, True), 2: (False, True, True), 3: (True, True, True)}
    assert [policy_for(s).all_reduce_grads for s in range(4)] == [True, False, False, False]
    assert [policy_for(s).gather_after_step for s in range(4)] == [False, True, True, False]
    assert [policy_for(s).reduce_per_unit for s in range(4)] == [False, False, True, True]


@pytest.mark.parametrize("bad", [4, -1, "3", None])
def test_unknown_stage_is_refused(bad):
    with pytest.raises(ValueError, match="stage must be 0, 1, 2 or 3"):
        policy_for(bad)


def test_impossible_combinations_are_refused():
    with pytest.raises(ValueError):
        StagePolicy(9, shard_weights=True, shard_grads=False, shard_state=True)
    with pytest.raises(ValueError):
        StagePolicy(9, shard_weights=False, shard_grads=True, shard_state=False)
