"""Staging ordinary host arrays for the direct roads (functions of a Direct, direct.py).

A rank whose input is not in the heap copies it into one half of its stage
window (the halves alternate by call), at the input's own offsets, so peers
read it there as they would a heap input. Only the bytes peers read are
copied: a staged reduce-scatter's own segment is read in place by its owner
and by nobody else, so from ``rs_parts_min_bytes`` it is left out.
"""
from __future__ import annotations

import numpy as np

from ..host.schedule import offsets


def ranges_of(counts):
    """One (offset, count) range per rank: the plain segments."""
    return tuple(((o, c),) for o, c in zip(offsets(counts), counts))


def copy_in(d, epoch, x, parts):
    """x into Direct ``d``'s stage half for call ``epoch``, at x's own offsets: all of
    it, or only ``parts`` ((offset, count) ranges, the bytes peers read)."""
    dst = d.staged_view(d.rank, epoch, x.nbytes).view(x.dtype)
    xf = x if x.ndim == 1 else x.reshape(-1)
    if parts is None:
        np.copyto(dst, xf)
    else:
        for o, c in parts:
            np.copyto(dst[o:o + c], xf[o:o + c])


def peer_parts(count, mine):
    """The ranges of a staged reduce-scatter input that peers read: all but our
    own ranges ``mine`` (which we read in place), merged, in order."""
    p, at = [], 0
    for o, c in sorted(r for r in mine if r[1]):
        if o > at:
            p.append((at, o - at))
        at = max(at, o + c)
    if at < count:
        p.append((at, count - at))
    return tuple(p)


def rs_parts(d, x, out, xloc, counts, ranges, ckey):
    """What a reduce-scatter copies in: None (all of x, or nothing when x is in the
    heap), or the ranges peers read when x is staged, large, and read in place by
    this rank (always on two ranks; else when out cannot overlap it)."""
    if xloc is not None or x.nbytes < d.tuning.rs_parts_min_bytes or \
            (d.size != 2 and np.may_share_memory(x, out)):
        return None
    return d.cached(("parts", x.size, ckey), lambda: peer_parts(x.size, (ranges or ranges_of(counts))[d.rank]))
