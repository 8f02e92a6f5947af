"""Async handles and the progress thread that runs collectives in call order.

MPI moves bytes only while some thread is inside an MPI call, so overlap
needs a thread that owns the traffic. Each Communicator has one
:class:`Engine`: async collectives are queued to its thread in call order
(the same order on every rank, like a CUDA stream under NCCL) and the caller
goes on computing; numpy and mpi4py release the GIL during large copies and
transfers. A blocking call with nothing queued runs on the caller's thread,
which saves the thread hand-off on small messages.
"""
from __future__ import annotations

import threading
from collections import deque

_local = threading.local()


def on_progress_thread() -> bool:
    """True on an Engine's progress thread: its waits must leave the core to
    the caller's thread, which computes meanwhile (see Context.wait)."""
    return getattr(_local, "progress", False)


class Work:
    """Handle of an async collective. ``wait()`` returns its result, once."""

    __slots__ = ("label", "_engine", "_finished", "_gate", "_result", "_error", "_waited", "_callbacks", "_lock")

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


class Engine:
    """Runs a communicator's collectives one at a time, in call order."""

    def __init__(self, name: str):
        self._name = name
        self._lock = threading.Lock()  # taken bare (a C-level with) on the fast lane
        self._cv = threading.Condition(self._lock)
        self._queue: deque = deque()
        self._inflight = 0  # queued or running on the thread
        self._inline = False  # a blocking call is running on its caller's thread
        self._thread: threading.Thread | None = None
        self._closed = False
        self._drainers = 0  # threads in drain()

    def submit(self, fn, label: str) -> Work:
        work = Work(label, self)
        with self._lock:  # (the Condition's own lock, taken bare: its Python methods cost ~1 us each)
            if self._closed:
                raise RuntimeError(f"{self._name}: communicator is closed ({label})")
            self._inflight += 1
            self._queue.append((fn, work))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            else:
                # the thread (one waiter suffices: drain() waits for _inflight to fall, not rise)
                self._cv.notify_all() if self._drainers else self._cv.notify()
        return work

    def enter_inline(self, label: str) -> bool:
        """Claim this thread for one blocking call when nothing is queued or running
        (True: run it, then call ``leave_inline``); False: go through ``run``."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name}: communicator is closed ({label})")
            if self._inflight or self._inline:
                return False
            self._inline = True
            return True

    def leave_inline(self) -> None:
        with self._lock:
            self._inline = False
            if self._queue:  # only the progress thread waits for this, and only with work queued
                self._cv.notify_all()

    def run(self, fn, label: str):
        """Run ``fn`` now on this thread if nothing is queued, else after the queue."""
        with self._cv:
            if self._closed:
                raise RuntimeError(f"{self._name}: communicator is closed ({label})")
            inline = self._inflight == 0 and not self._inline
            if inline:
                self._inline = True
        if not inline:
            return self.submit(fn, label).wait()
        try:
            return fn()
        finally:
            with self._cv:
                self._inline = False
                if self._queue:  # only the progress thread waits for this, and only with work queued
                    self._cv.notify_all()

    def steal(self, work: Work) -> bool:
        """Run ``work`` on the calling thread if it heads the queue and nothing is
        running (so call order holds); True when it ran here. Its callbacks run
        here too."""
        with self._lock:
            if self._inline or not self._queue or self._queue[0][1] is not work \
                    or self._inflight != len(self._queue):  # the progress thread is running one
                return False
            fn, _ = self._queue.popleft()
            self._inline = True
        try:
            result, error = fn(), None
        except BaseException as e:  # handed to the waiter, as from the thread
            result, error = None, e
        finally:
            with self._lock:
                self._inline = False
                self._inflight -= 1
                if self._queue or self._drainers:  # the thread waits for queued work; drain() for none
                    self._cv.notify_all()
        work._finish(result, error)
        return True

    def drain(self) -> None:
        """Wait until everything queued so far has run."""
        with self._cv:
            self._drainers += 1
            try:
                self._cv.wait_for(lambda: self._inflight == 0)
            finally:
                self._drainers -= 1

    def _loop(self) -> None:
        _local.progress = True
        while True:
            with self._cv:
                # never beside an inline call, closed or not: one collective at a time
                self._cv.wait_for(lambda: not self._inline and (self._queue or self._closed))
                if self._closed and not self._queue:
                    return
                fn, work = self._queue.popleft()
            try:
                result, error = fn(), None
            except BaseException as e:  # handed to the waiter
                result, error = None, e
            fn = None  # before the waiter wakes: what the task held (the caller's arrays) is not kept here
            with self._lock:
                self._inflight -= 1
                if self._drainers:
                    self._cv.notify_all()
            work._finish(result, error)
            work = result = error = None

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()
