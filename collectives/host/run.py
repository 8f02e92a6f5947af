"""The point-to-point roads' one entry: a checked call on host (or device) arrays
runs the two-rank exchange (pair.py) or the chunked ring (ring.py), whichever
road roads.choose gave it. ``counts`` are the segments (an all-reduce's split,
see schedule.split_counts); a broadcast passes its root instead."""
from __future__ import annotations

import numpy as np

from ..roads import Road
from . import pair, ring
from .schedule import offsets


def run(ctx, road: Road, kind: str, x, out, counts, op=None, in_place: bool = False,
        scratch_bytes: int | None = None) -> None:
    """Run ``kind`` on flat arrays ``x`` and ``out`` by ``road`` (PAIR or RING, or
    DEVICE_RING: the ring over the device transport). ``in_place``: out is x's memory
    (all-reduce, broadcast) or x is out's own segment (all-gather). ``scratch_bytes``:
    the most an in-place two-rank all-reduce receives into scratch at once (the
    tuning table's pair_inplace_bytes)."""
    if road is Road.PAIR:
        if kind == "all_reduce":
            return pair.all_reduce(ctx, x, out, offsets(counts), op, in_place, ring.TAG_DATA, ring.TAG_GATHER,
                                   scratch_bytes)
        if kind == "reduce_scatter":
            return pair.reduce_scatter(ctx, x, out, offsets(counts), op, ring.TAG_DATA)
        if kind == "all_gather":
            offs = offsets(counts)
            own = out[offs[ctx.rank]:offs[ctx.rank + 1]]
            return pair.all_gather(ctx, x, own if own.size and not in_place else None, out, offs, ring.TAG_DATA,
                                   ring.MAX_MESSAGE_BYTES)
        return pair.broadcast(ctx, out, counts, ring.TAG_DATA)
    if kind == "all_reduce":
        return ring.all_reduce(ctx, x, out, counts, op)
    if kind == "reduce_scatter":
        return ring.reduce_scatter(ctx, x, out, counts, op)
    if kind == "all_gather":
        return ring.all_gather(ctx, x, out, counts, in_place)
    return ring.broadcast(ctx, out, counts)


def in_place_memory(x: np.ndarray, out: np.ndarray) -> bool:
    """out is x, or another object over the very same memory (the aliasing rule allows
    nothing in between, so overlapping bounds mean that)."""
    return out is x or np.may_share_memory(x, out)
