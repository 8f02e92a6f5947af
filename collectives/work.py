"""Async handles and the progress thread that runs collectives in call order.

MPI moves bytes only while some thread is inside an MPI call, so overlap
needs a thread that owns the traffic. Each Communicator has one
:class:`Engine`: async collectives are queued to its thread in call order
(the same order on every rank, like a CUDA stream under NCCL) and the caller
goes on computing; numpy and mpi4py release the GIL during large copies and
transfers. A blocking call with nothing queued runs on the caller's thread,
which saves the thread hand-off on small messages. The queue and its thread
are engine.py's; here are the handles and what the thread tells its waits.
"""
from __future__ import annotations

import threading

_local = threading.local()


def on_progress_thread() -> bool:
    """True on an Engine's progress thread: its waits must leave the core to
    the caller's thread, which computes meanwhile (see Context.wait)."""
    return getattr(_local, "progress", False)


class Work:
    """Handle of an async collective. ``wait()`` returns its result, once."""

    __slots__ = ("label", "_engine", "_finished", "_gate", "_result", "_error", "_waited", "_callbacks", "_lock",
                 "_queued")

    def __init__(self, label: str, engine: "Engine | None" = None):
        self.label = label
        self._engine = engine  # the queue it waits in: wait() may run it here (Engine.steal)
        # held until the collective finishes: waiters block on it (a bare lock costs a tenth
        # of a threading.Event, whose Condition is Python: ~2.5 us a Work)
        self._gate = threading.Lock()
        self._gate.acquire()
        self._finished = False
        self._result = None
        self._error: BaseException | None = None
        self._waited = False
        self._callbacks: list = []
        self._lock = threading.Lock()
        self._queued = False  # in its engine's queue, not yet taken (Engine.steal)

    def _finish(self, result=None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._finished:
                raise RuntimeError(f"{self.label}: completed twice")
            self._result, self._error = result, error
            self._finished = True
            self._gate.release()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def add_done_callback(self, fn) -> None:
        """Call ``fn(work)`` when the collective finishes (on the progress thread),
        or now if it already has. ``fn`` reads the outcome with ``work.result()``.

        Args:
          fn: a callable taking this Work; what it raises propagates to its caller.
        """
        with self._lock:
            if not self._finished:
                self._callbacks.append(fn)
                return
        fn(self)

    def result(self):
        """The finished collective's result, or raise its error; does not count as ``wait()``."""
        if not self._finished:
            raise RuntimeError(f"{self.label}: result() before the collective finished")
        if self._error is not None:
            raise self._error
        return self._result

    def is_completed(self) -> bool:
        return self._finished

    def _until_done(self, timeout: float | None = None) -> bool:
        """Block until the collective finished (at most ``timeout`` seconds); whether it has."""
        if self._finished:
            return True
        if not self._gate.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return False
        self._gate.release()  # open for every other waiter
        return True

    def wait(self, timeout: float | None = None):
        """Block until the collective finished; return its result or raise its error.

        Args:
          timeout: seconds to wait here (the collective has its own deadline too).
        """
        if self._waited:
            raise RuntimeError(f"{self.label}: wait() called twice on the same Work")
        if timeout is None:  # bounded by the collective's own deadline only: may run it here
            self.run_here()
        if not self._until_done(timeout):
            raise TimeoutError(f"{self.label}: not complete after {timeout} s")
        self._waited = True
        if self._error is not None:
            raise self._error
        return self._result

    def join(self):
        """Block until the collective finished (running it here when it is next in
        line); return its result or raise its error. Unlike ``wait()``, may be
        called any number of times (torch's Work.wait may be)."""
        self.run_here()
        self._until_done()
        return self.result()

    def run_here(self) -> None:
        """If this collective is next in its queue and the progress thread has not
        picked it up, run it on this (the waiting) thread now: waking the thread
        and being woken by it costs more than a small collective (Engine.steal)."""
        if self._engine is not None and not self._finished:
            self._engine.steal(self)

    def __repr__(self) -> str:
        state = "done" if self.is_completed() else "pending"
        return f"<Work {self.label} {state}>"
