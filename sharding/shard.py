"""Shard arithmetic: where each parameter lives in its unit's flat buffer and
which range of that buffer each rank owns. Pure functions, no arrays.

Padding policy (stated once, tested in tests/test_sharding_shard.py):

* every parameter starts at a multiple of ``ALIGN`` elements (64 bytes of
  float32), so vector loads on a parameter start aligned;
* the unit's flat buffer is padded at the end to a multiple of
  ``world * ALIGN`` elements, so every shard has the same size ``S`` and
  starts aligned too;
* padding elements are zero in every buffer and stay zero (their gradient
  is zero, so every optimizer leaves them at zero).

Parameter offsets depend only on the shapes, never on the world size; a
checkpoint written at one world size is therefore the same flat index space
at another, up to the tail padding.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 16


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is >= n."""
    return -(-n // multiple) * multiple


def padded_numel(numel: int, world: int, align: int = ALIGN) -> int:
    """Flat-buffer length for ``numel`` used elements on ``world`` ranks."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    return round_up(max(numel, 1), world * align)


@dataclass(frozen=True)
class ShardInfo:
    """Rank ``rank``'s range [offset, offset + size) of a flat buffer."""
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size

    def slice(self) -> slice:
        return slice(self.offset, self.end)


def shard_range(numel: int, world: int, rank: int) -> ShardInfo:
    """The range rank ``rank`` owns of a flat buffer of ``numel`` elements
    (already padded: numel must be divisible by world)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world}")
    if numel % world:
        raise ValueError(f"flat buffer of {numel} elements does not split over {world} ranks; pad it first")
    size = numel // world
    return ShardInfo(rank * size, size)


@dataclass(frozen=True)
class ParamSlot:
    """One named parameter inside a unit's flat buffer."""
    name: str
    shape: tuple
    offset: int
    numel: int

    @property
    def end(self) -> int:
        return self.offset + self.numel


@dataclass(frozen=True)
class UnitLayout:
    """A unit's flat-buffer layout on a given world size."""
    name: str
    slots: tuple  # of ParamSlot, in the trainer's order
    numel: int  # used elements incl. alignment gaps (world independent)
    padded: int  # flat-buffer length on this world size
    world: int

    @property
    def shard_size(self) -> int:
        return self.padded // self.world

    def shard(self, rank: int) -> ShardInfo:
        return shard_range(self.padded, self.world, rank)

    @property
    def num_params(self) -> int:
        """Real parameter elements (no padding)."""
        return sum(s.numel for s in self.slots)


def layout_unit(name: str, shapes: list, world: int, align: int = ALIGN) -> UnitLayout:
    """Place named shapes one after another, each start aligned.

    Args:
      name: unit name.
      shapes: list of (param name, shape) in order.
      world: number of ranks.
    """
    slots, off = [], 0
    for pname, shape in shapes:
        shape = tuple(int(d) for d in shape)
        n = 1
        for d in shape:
            n *= d
        off = round_up(off, align)
        slots.append(ParamSlot(pname, shape, off, n))
        off += n
    return UnitLayout(name, tuple(slots), off, padded_numel(off, world, align), world)


def params_in_shard(layout: UnitLayout, shard: ShardInfo) -> list:
    """Which parameters a shard touches, as (slot, lo, hi): elements [lo, hi)
    of the flattened parameter lie in the shard, at shard offset slot.offset + lo - shard.offset."""
    out = []
    for s in layout.slots:
        lo, hi = max(s.offset, shard.offset), min(s.end, shard.end)
        if lo < hi:
            out.append((s, lo - s.offset, hi - s.offset))
    return out


def overlap(a: ShardInfo, b: ShardInfo) -> ShardInfo | None:
    """The common range of two ranges, or None."""
    lo, hi = max(a.offset, b.offset), min(a.end, b.end)
    return ShardInfo(lo, hi - lo) if lo < hi else None
