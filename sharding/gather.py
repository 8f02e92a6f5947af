"""Stage 3's weights: each unit's full weights all-gathered for one use, the
next unit's gather launched meanwhile (prefetch), everything freed after.

The prefetch follows the trainer's order: forward while the unit indices
grow, backward once they shrink or repeat (the backward starts with the last
unit again). The handles are :class:`Pending`, so the memory report sees the
gathered buffers (``in_use``: the peak; ``prefetched``) until they are freed.
"""
from __future__ import annotations

import contextlib

from .buckets import Pending

DIRECTIONS = ("auto", "forward", "backward", "none")


class UnitGatherer:
    """All-gathers of units' weight shards, at most one in use per unit.

    Args:
      comm: the Communicator.
      units: ``{name: _Unit}`` in forward order (each with ``pshard`` and ``layout``).
      dtype: the compute dtype of the gathered weights.
      xp: the array module of the shards (numpy or cupy).
      prefetch: launch the next unit's gather while the current one is used.
    """

    def __init__(self, comm, units, dtype, xp, prefetch: bool):
        self.comm, self.units, self.dtype, self.xp, self.prefetch = comm, units, dtype, xp, prefetch
        self.order = list(units)
        self.in_use: dict = {}  # unit -> Pending whose weights a `with use()` block holds
        self.prefetched: dict = {}  # unit -> Pending launched ahead of its use
        self._last = -1

    @contextlib.contextmanager
    def use(self, unit: str, direction: str = "auto"):
        """The unit's gathered flat weights for the block; freed on exit."""
        if direction not in DIRECTIONS:
            raise ValueError(f"gather({unit!r}): direction must be one of {DIRECTIONS}, got {direction!r}")
        if unit in self.in_use:
            raise RuntimeError(f"gather({unit!r}) entered again while its weights are already gathered")
        i = self.order.index(unit)
        if direction == "auto":
            direction = "forward" if i > self._last else "backward"
        self._last = i
        pend = self.prefetched.pop(unit, None) or self.launch(unit)
        self.in_use[unit] = pend
        try:
            full = pend.wait()
            if self.prefetch and direction != "none":
                self._prefetch_after(i, direction)
            yield full
        finally:
            self.in_use.pop(unit, None)
            pend.release()

    def _prefetch_after(self, i: int, direction: str) -> None:
        j = i + 1 if direction == "forward" else i - 1
        if direction == "forward" and j == len(self.order):
            j = i  # the backward starts with the last unit again
        if 0 <= j < len(self.order) and self.order[j] not in self.prefetched:
            self.prefetched[self.order[j]] = self.launch(self.order[j])

    def launch(self, unit: str) -> Pending:
        """Start the all-gather of ``unit``'s weights."""
        u = self.units[unit]
        out = self.xp.empty(u.layout.padded, self.dtype)
        return Pending("all-gather", unit).launch(self.comm.all_gather(u.pshard, out=out, async_op=True), out)

    def drop_prefetches(self) -> None:
        """Finish and free every prefetch (before step(), a checkpoint, full_params());
        the first failure is raised after all are finished."""
        pending, self.prefetched, self._last = list(self.prefetched.values()), {}, -1
        error = None
        for pend in pending:
            try:
                pend.wait()
            except Exception as e:  # keep finishing the others; report the first
                error = error or e
            pend.release()
        if error is not None:
            raise error
