"""The ring as a pure schedule: which segment each rank sends and receives.

A buffer of ``n`` elements is cut into ``world`` *segments* (``counts``, uneven
and empty ones allowed); segment ``s`` starts at ``offsets(counts)[s]``.

Reduce-scatter, step t = 0 .. world-2: rank r sends segment (r - t - 1) to
its right neighbour r + 1 and receives segment (r - t - 2) from its left
neighbour r - 1, which it reduces into its own copy. What a rank reduces at
step t is what it sends at step t + 1, so after world - 1 steps rank r holds
segment r reduced over every rank.

All-gather, step t: rank r sends segment (r - t) and receives (r - t - 1):
the segment it received at step t is the one it forwards at step t + 1.

These two functions are the schedule ring.py runs, and what
tests/test_schedule.py checks for every world size up to 16.

Within a step, each segment is cut into *chunks* of at most ``chunk`` elements.
The executor posts every chunk's receive at once and reduces chunk k while
chunk k + 1 is still arriving, so the reduce reads data that is still in
cache and the wire stays busy. Sender and receiver cut the same segment from
the same counts, so they agree on the chunks without telling each other;
an empty segment has no chunks and sends nothing.

Everything here is pure: tests check it for every world size up to 16.
"""
from __future__ import annotations

import numbers

from typing import NamedTuple


class Range(NamedTuple):
    """Half-open element range [start, stop) of a flat buffer. (A named tuple:
    the executor makes a few per chunk, and it builds faster than a frozen
    dataclass.)"""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    def slice(self) -> slice:
        return slice(self.start, self.stop)


def split_counts(n: int, world: int, granule: int = 1) -> list[int]:
    """Split n elements into ``world`` segments, as even as possible.

    Segments are multiples of ``granule`` elements (for aligned vector loads)
    except the last non-empty one; earlier segments take the remainder first.
    """
    if n < 0 or world < 1 or granule < 1:
        raise ValueError(f"split_counts: bad n={n}, world={world}, granule={granule}")
    units, tail = divmod(n, granule)
    base, extra = divmod(units, world)
    counts = [(base + (1 if s < extra else 0)) * granule for s in range(world)]
    if tail:
        last = max((s for s in range(world) if counts[s]), default=0)
        counts[last] += tail
    return counts


def offsets(counts: list[int]) -> list[int]:
    """Start offset of every segment, plus the total at the end."""
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    return out


def reduce_scatter_step(rank: int, world: int, step: int) -> tuple[int, int]:
    """(segment sent to rank+1, segment received from rank-1) at ``step``."""
    return (rank - step - 1) % world, (rank - step - 2) % world


def all_gather_step(rank: int, world: int, step: int) -> tuple[int, int]:
    """(segment sent to rank+1, segment received from rank-1) at ``step``."""
    return (rank - step) % world, (rank - step - 1) % world


def chunks(rng: Range, chunk: int) -> list[Range]:
    """Cut a range into chunks of at most ``chunk`` elements (none if empty)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 element, got {chunk}")
    if rng.stop - rng.start <= chunk:  # the common case with 1 MiB chunks: one chunk, or none
        return [rng] if rng.stop > rng.start else []
    return [Range(s, min(s + chunk, rng.stop)) for s in range(rng.start, rng.stop, chunk)]


def halving_peers(rank: int, world: int) -> tuple[int, list[int]]:
    """Recursive doubling plan for ``world`` ranks that need not be a power of two.

    Returns (p, partners): p is the largest power of two <= world. Ranks
    r >= p first fold their data into rank r - p and get the result back at
    the end; ranks r < p exchange with r ^ 1, r ^ 2, r ^ 4, ... in turn.
    ``partners`` is empty for the folded ranks.
    """
    p = 1
    while p * 2 <= world:
        p *= 2
    if rank >= p:
        return p, []
    partners, d = [], 1
    while d < p:
        partners.append(rank ^ d)
        d *= 2
    return p, partners


def check_counts(counts, size: int, what: str) -> list[int]:
    """A caller's ``counts``: a sequence of ``size`` non-negative integers (as a list),
    or TypeError/ValueError naming the collective ``what``."""
    try:
        given = list(counts)
    except TypeError:
        raise TypeError(f"{what}: counts must be a sequence of integers, got {counts!r}") from None
    bad = [c for c in given if not isinstance(c, numbers.Integral)]
    if bad:  # int(2.5) would quietly make it 2
        raise TypeError(f"{what}: counts must be integers, got {bad[0]!r} in {given!r}")
    counts = [int(c) for c in given]
    if len(counts) != size:
        raise ValueError(f"{what}: counts has {len(counts)} entries, world size is {size}")
    if any(c < 0 for c in counts):
        raise ValueError(f"{what}: counts must be >= 0, got {counts}")
    return counts
