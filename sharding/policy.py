"""What each ZeRO stage keeps full and what it shards, written down once.

A stage is three choices, as in DeepSpeed's ZeRO stages and FSDP2's
sharding strategies (NO_SHARD, SHARD_GRAD_OP, FULL_SHARD): whether a rank
keeps the full compute weights between uses, the full gradient buffer, and
the full float32 master with its optimizer state, or only its shard of each.
Everything else follows from those three:

    stage  weights   gradients   master + state   gradients are reduced
    0      full      full        full             all-reduce in step()
    1      full      full        sharded          reduce-scatter in step()
    2      full      sharded     sharded          reduce-scatter per unit, in the backward
    3      sharded   sharded     sharded          reduce-scatter per unit, in the backward

ZeroOptimizer and the checkpoints ask the policy, never the stage number.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StagePolicy:
    """Which of weights, gradients and optimizer state one ZeRO stage shards."""
    stage: int
    shard_weights: bool  # compute weights: only the owned shard, all-gathered per use
    shard_grads: bool  # gradient buffer: only the owned shard, reduce-scattered per unit
    shard_state: bool  # float32 master and optimizer state: only the owned shard

    def __post_init__(self):
        if (self.shard_weights and not self.shard_grads) or (self.shard_grads and not self.shard_state):
            raise ValueError(f"stage {self.stage}: weights sharded needs gradients sharded, and gradients "
                             "sharded needs optimizer state sharded")

    @property
    def gather_per_use(self) -> bool:
        """Weights are all-gathered on every ``gather()`` (and freed after)."""
        return self.shard_weights

    @property
    def reduce_per_unit(self) -> bool:
        """Gradients are reduce-scattered as each unit's arrive, not in step()."""
        return self.shard_grads

    @property
    def all_reduce_grads(self) -> bool:
        """step() all-reduces the full gradients (every rank updates everything)."""
        return not self.shard_state

    @property
    def gather_after_step(self) -> bool:
        """step() all-gathers the updated shards into the kept full weights."""
        return self.shard_state and not self.shard_weights


POLICIES = {
    0: StagePolicy(0, shard_weights=False, shard_grads=False, shard_state=False),
    1: StagePolicy(1, shard_weights=False, shard_grads=False, shard_state=True),
    2: StagePolicy(2, shard_weights=False, shard_grads=True, shard_state=True),
    3: StagePolicy(3, shard_weights=True, shard_grads=True, shard_state=True),
}


def policy_for(stage: int) -> StagePolicy:
    """The policy of ZeRO stage 0, 1, 2 or 3."""
    try:
        return POLICIES[stage]
    except (KeyError, TypeError):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}") from None
