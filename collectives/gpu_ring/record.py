"""The kernels' error record, read back as a CollectiveTimeout naming rank, peer and step.

When a wait on the device passes its deadline, the first block of that rank to give up
writes an RzErr (layout.Err) into pinned host memory and sets the abort words of its
neighbours (the small kernels: of every peer); their waiting blocks then leave and
write their own records, cause "aborted", carrying the abort word: who gave up first
(origin), whom it blames, and what it waited for. The blame follows the chain of ranks
that are themselves stuck waiting (each lead thread publishes whom it waits for), so a
missing rank is named even when a rank further down the ring's deadline passed first.
:func:`decode` turns one record into the exception the host raises; :func:`abort_origin`
unpacks the word.
"""
from __future__ import annotations

from ..errors import CollectiveTimeout
from . import layout

KINDS = {4: "one-shot all-reduce", 5: "one-shot reduce-scatter", 6: "one-shot all-gather", 7: "two-shot all-reduce"}
WAITED = {layout.WAIT_DATA: "its data (ready counter)", layout.WAIT_SLOT: "a free slot (freed counter)",
          layout.WAIT_CREDIT: "it to enter the call (credit counter)",
          layout.WAIT_ARRIVE: "its arrival at the epoch barrier", layout.WAIT_ENTRY: "nothing yet (entry)"}


def abort_origin(word: int) -> tuple[int, int, int] | None:
    """(origin rank, the rank it blames, what it waited for) from an abort word; None if 0."""
    if not word:
        return None
    return (word & 0xFFFF) - 1, ((word >> 16) & 0xFFFF) - 1, (word >> 32) & 0xFF


def phase(coll: int, step: int, world: int) -> str:
    """Where step ``step`` of kernel ``coll`` (RzErr.coll) is, in the ring's words."""
    if coll == 2:
        return (f"reduce-scatter half, step {step} of {2 * world - 1}" if step < world
                else f"all-gather half, step {step} of {2 * world - 1}")
    if coll in (0, 1):
        return f"{'reduce-scatter' if coll == 0 else 'all-gather'} step {step} of {world}"
    return f"{KINDS.get(coll, f'kernel {coll}')}, barrier {step}"


def decode(err: layout.Err, world: int) -> CollectiveTimeout | None:
    """The CollectiveTimeout a valid record stands for (None when the record is empty).

    Args:
      err: a rank's error record.
      world: ranks in the ring (for the step's wording).

    The exception carries ``rank``, ``peer`` (whom it waited for), ``step``, ``channel``,
    ``cause`` ("timeout", "aborted" or "host abort"), ``blamed`` (where the chain of
    waiting ranks ends) and ``origin`` (first rank to give up, the rank it blamed).
    """
    if not err.valid:
        return None
    where = f"{phase(err.coll, err.step, world)}, round {err.round}, channel {err.channel}"
    waited = WAITED.get(err.kind, f"wait kind {err.kind}")
    origin = abort_origin(err.abort)
    if err.cause == layout.TIMEOUT:
        text = (f"gpu ring: rank {err.rank} timed out after {err.waited_ns / 1e9:.3f} s at {where} waiting for "
                f"rank {err.peer}: {waited} stayed at {err.seen}, wanted {err.wanted}")
        if err.blamed >= 0 and err.blamed != err.peer:
            text += f"; rank {err.peer} was itself waiting, and the chain of waiting ranks ends at rank {err.blamed}"
    else:
        why = "the host aborted" if err.cause == layout.HOST_ABORT else "the ring was aborted"
        if origin is not None and err.cause != layout.HOST_ABORT:
            why += (f" because rank {origin[0]} timed out, blaming rank {origin[1]} "
                    f"(it waited for {WAITED.get(origin[2], origin[2])})")
        peer = f" waiting for rank {err.peer} ({waited})" if err.peer >= 0 else ""
        text = f"gpu ring: rank {err.rank} left at {where}{peer}: {why}"
    exc = CollectiveTimeout(text + "; the workspaces were reset")
    exc.rank, exc.peer, exc.step, exc.channel, exc.blamed = err.rank, err.peer, err.step, err.channel, err.blamed
    exc.cause = {layout.TIMEOUT: "timeout", layout.ABORTED: "aborted", layout.HOST_ABORT: "host abort"}.get(err.cause, "?")
    exc.origin = None if origin is None else origin[:2]
    return exc
