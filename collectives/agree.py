"""The safety header: every rank proves it is running the same collective.

Before any data moves, each rank exchanges a small header (sequence number,
collective, op, dtype, counts, root, protocol) in a dissemination pattern:
in round k a rank sends to r + 2^k and receives from r - 2^k, keeping the
elementwise min and max of every field. After ceil(log2 N) rounds every rank
holds the min and max over all ranks, so every rank reaches the same
verdict at the same point: no rank is left waiting for data that will never
come. Only on a mismatch do the ranks swap full headers, to name who differs.

Cost: ceil(log2 N) messages of 192 bytes per collective, cheap enough to stay
on (a barrier is exactly this exchange and nothing else).
"""
from __future__ import annotations

import numpy as np

from .dtypes import DTYPES, OPS
from .errors import MismatchError
from .schedule import dissemination_peers

TAG_AGREE = 11
TAG_DETAIL = 12

FIELDS = ("version", "seq", "collective", "op", "dtype", "count", "counts", "root",
          "algorithm", "chunk", "small", "device")
VERSION = 1
COLLECTIVES = {"all_reduce": 1, "reduce_scatter": 2, "all_gather": 3, "broadcast": 4, "barrier": 5}
ALGORITHMS = {"ring": 1, "mpi": 2, "nccl": 3}
_NAMES = {
    "collective": {v: k for k, v in COLLECTIVES.items()},
    "op": {v: k for k, v in OPS.items()},
    "dtype": {code: name for name, (_, code) in DTYPES.items()},
    "algorithm": {v: k for k, v in ALGORITHMS.items()},
}


def digest(counts) -> int:
    """A deterministic 61-bit fingerprint of a counts list (0 for None)."""
    if counts is None:
        return 0
    h = 1469598103934665603 % ((1 << 61) - 1)
    for c in counts:
        h = (h * 1099511628211 + int(c) + 1) % ((1 << 61) - 1)
    return h


def make_header(**fields) -> np.ndarray:
    h = np.zeros(len(FIELDS), np.int64)
    h[0] = VERSION
    for name, value in fields.items():
        h[FIELDS.index(name)] = value
    return h


def _show(field: str, value: int) -> str:
    names = _NAMES.get(field)
    return names.get(int(value), str(int(value))) if names else str(int(value))


def agree(ctx, header: np.ndarray) -> None:
    """Check ``header`` against every other rank's; raise MismatchError on all ranks if any differ."""
    n, r, tr = ctx.size, ctx.rank, ctx.transport
    if n == 1:
        return
    f = len(FIELDS)
    cur = np.concatenate([header, header])
    got = np.empty_like(cur)
    for k, (to, frm) in enumerate(dissemination_peers(r, n)):
        rr = tr.irecv(got, frm, TAG_AGREE)
        ss = tr.isend(cur.copy(), to, TAG_AGREE)
        ctx.wait([rr], peer=frm, step=f"agreement round {k}", chunk=0,
                 what="receive of the header (did it call the same collective?)")
        ctx.wait([ss], peer=to, step=f"agreement round {k}", chunk=0, what="send of the header")
        np.minimum(cur[:f], got[:f], out=cur[:f])
        np.maximum(cur[f:], got[f:], out=cur[f:])
    if np.array_equal(cur[:f], cur[f:]):
        return
    # Every rank got here: swap full headers to say exactly who differs.
    all_h = np.empty((n, f), np.int64)
    all_h[r] = header
    handles = []
    for p in range(n):
        if p != r:
            handles.append(tr.irecv(all_h[p], p, TAG_DETAIL))
            handles.append(tr.isend(header, p, TAG_DETAIL))
    ctx.wait(handles, peer=-1, step="mismatch report", chunk=0, what="exchange of headers")
    raise MismatchError(f"rank {r}: ranks disagree on a collective call. " + describe(all_h))


def describe(all_h: np.ndarray) -> str:
    """Say which fields differ and what each rank passed."""
    parts = []
    coll = _show("collective", np.bincount(all_h[:, 2]).argmax())
    for j, field in enumerate(FIELDS):
        col = all_h[:, j]
        if (col != col[0]).any():
            vals = ", ".join(f"rank {p}: {_show(field, v)}" for p, v in enumerate(col))
            parts.append(f"{field} differs ({vals})")
    hint = ""
    if any(p.startswith("count") for p in parts) and coll == "all_gather":
        hint = " (pieces of different lengths need counts=)"
    seq = int(all_h[0, 1])
    return f"Call #{seq} ({coll}): " + "; ".join(parts) + hint
