"""Async communication handles that refuse misuse (after picotron's Bucket).

A :class:`Pending` holds one launched collective and the buffers it reads
and writes, so they stay alive (and are counted by the memory report) until
``wait()`` returns. Launching twice or waiting on nothing raises at once.
"""
from __future__ import annotations

import time


class Pending:
    """One in-flight collective of a unit: a gradient reduce-scatter or a weight all-gather."""

    def __init__(self, kind: str, unit: str):
        self.kind, self.unit = kind, unit
        self._work = None
        self._buffers: tuple = ()
        self._done = False
        self.launched_at = 0.0
        self.wait_s = 0.0  # time the caller spent blocked in wait()

    def launch(self, work, *buffers) -> "Pending":
        """Record the Work of a collective just started and the buffers it uses."""
        if self._work is not None or self._done:
            raise RuntimeError(f"{self.kind} of unit {self.unit!r} launched twice")
        self._work, self._buffers = work, buffers
        self.launched_at = time.perf_counter()
        return self

    @property
    def launched(self) -> bool:
        return self._work is not None

    def is_completed(self) -> bool:
        return self._work is not None and self._work.is_completed()

    def wait(self):
        """Block until the collective is done; return its result. Only once, even if it raises."""
        if self._work is None:
            raise RuntimeError(f"wait() on {self.kind} of unit {self.unit!r} that was never launched")
        t0 = time.perf_counter()
        try:
            return self._work.wait()
        finally:
            # done either way: a wait that raised (timeout, mismatch) leaves the
            # collective failed, not in flight, so release() passes its error on
            self.wait_s = time.perf_counter() - t0
            self._work, self._done = None, True

    @property
    def buffers(self) -> tuple:
        return self._buffers

    def release(self) -> None:
        """Drop the buffers (after wait)."""
        if self._work is not None:
            raise RuntimeError(f"{self.kind} of unit {self.unit!r} released while still in flight")
        self._buffers = ()
