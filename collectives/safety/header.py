"""The safety header's fields, and what a mismatch report says about them.

Every collective starts with a header of NF int64 fields (FIELDS) that
agree.py all-reduces as [min, max] over the ranks; the counts list travels
as a 61-bit fingerprint (digest). When the ranks disagree, describe() turns
every rank's header into one message naming each field that differs and
what each rank passed.
"""
from __future__ import annotations

import struct

import numpy as np

from ..dtypes import COLLECTIVE_CODES, OPS, TABLE

FIELDS = ("version", "seq", "collective", "op", "dtype", "count", "counts", "root",
          "algorithm", "chunk", "small", "device")
NF = len(FIELDS)
HEADER_BYTES = 2 * NF * 8  # min and max of every field
VERSION = 1
COLLECTIVES = COLLECTIVE_CODES
ALGORITHMS = {"ring": 1, "mpi": 2, "nccl": 3}
_NAMES = {
    "collective": {v: k for k, v in COLLECTIVES.items()},
    "op": {v: k for k, v in OPS.items()},
    "dtype": {row.code: row.name for row in TABLE},
    "algorithm": {v: k for k, v in ALGORITHMS.items()},
}


def digest(counts) -> int:
    """A deterministic 61-bit fingerprint of a counts list (0 for None)."""
    if counts is None:
        return 0
    m = (1 << 61) - 1
    h = 1469598103934665603 % m
    for c in counts:
        h = (h * 1099511628211 + int(c) + 1) % m
    return h


def make_header(seq=0, collective=0, op=0, dtype=0, count=0, counts=0, root=0,
                algorithm=0, chunk=0, small=0, device=0) -> list[int]:
    """This rank's header, in FIELDS order (codes from COLLECTIVES, OPS, DTYPES, ALGORITHMS)."""
    return [VERSION, seq, collective, op, dtype, count, counts, root, algorithm, chunk, small, device]


_WIRE = struct.Struct(f"={2 * NF}q")  # [header, -header]: one elementwise min keeps min and max


class Header(list):
    """A header (a list in FIELDS order, as make_header returns) that carries its
    own wire image: the int64 words [fields, -fields] that agree.py sends and
    signals.py posts, packed once. A plan (plan.py) keeps one per call shape and
    only ``stamp``s the sequence number into it as each call starts to run
    (collectives of a communicator run one at a time, so no two calls share it
    at once): packing 24 words costs more than the rest of a small call's
    bookkeeping.

    Args:
      fields: the header's values in FIELDS order.
    """

    __slots__ = ("wire", "head", "_words")

    def __init__(self, fields):
        super().__init__(fields)
        self.wire = bytearray(_WIRE.pack(*fields, *[-v for v in fields]))
        self.head = memoryview(self.wire)[:NF * 8]  # the fields alone (signals.py posts these)
        self._words = memoryview(self.wire).cast("q")

    def stamp(self, seq: int) -> "Header":
        """Set the sequence number, in the list and in the wire image; returns self."""
        self[1] = seq
        w = self._words
        w[1] = seq
        w[NF + 1] = -seq
        return self


def _show(field: str, value: int) -> str:
    names = _NAMES.get(field)
    return names.get(int(value), str(int(value))) if names else str(int(value))


def describe(all_h: np.ndarray) -> str:
    """Say which fields differ and what each rank passed. When the collectives
    themselves differ, their other fields differ as a consequence and are not
    listed; the counts lists travel as a fingerprint, so ranks are grouped by
    which list they passed."""
    parts = []
    coll = _show("collective", np.bincount(all_h[:, 2]).argmax())
    differ = [j for j in range(NF) if (all_h[:, j] != all_h[0, j]).any()]
    if FIELDS.index("collective") in differ:
        differ = [j for j in differ if FIELDS[j] in ("version", "seq", "collective")]
    for j in differ:
        field, col = FIELDS[j], all_h[:, j]
        if field == "counts":
            groups = {}
            for q, v in enumerate(col):
                groups.setdefault(int(v), []).append(q)
            vals = "; ".join("ranks " + ", ".join(map(str, g)) if len(g) > 1 else f"rank {g[0]}"
                             for g in groups.values())
            parts.append(f"counts differs (the same list within each group: {vals})")
            continue
        vals = ", ".join(f"rank {q}: {_show(field, v)}" for q, v in enumerate(col))
        parts.append(f"{field} differs ({vals})")
    hint = ""
    if coll == "all_gather" and any(x.startswith("count") for x in parts):
        hint = " (pieces of different lengths need counts=)"
    return f"Call #{int(all_h[0, 1])} ({coll}): " + "; ".join(parts) + hint
