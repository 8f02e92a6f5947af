"""The progress thread that runs a communicator's collectives in call order (work.py: their handles).

A blocking call with nothing queued runs on the caller's thread; an async one is
queued, and its caller's ``wait()`` runs it there when it is next in line (steal).
"""
from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from . import work as _work
from .work import Work

try:
    from ._fastpath import gate as _GATE
except ImportError:  # built without a C compiler (or before the gate): each submit wakes the thread
    _GATE = None


class Engine:
    """Runs a communicator's collectives one at a time, in call order.

    Queued calls are left to their caller's ``wait()`` while the caller keeps
    queueing (until none has been queued for ``grace`` seconds, or the oldest has
    waited ``patience``): the wait runs them on the waiting thread, head first
    (``steal``), where the progress thread, woken for them, would take the GIL at
    every point the caller's thread lets it go (torch's dispatch releases it
    around the group's methods), and the caller would wait to get it back. So
    the thread waits in C with the GIL released (``_fastpath.gate`` on
    ``_words``) and returns to Python for calls left past the grace or the
    patience, for close, hurry and drain, or after ``awake`` seconds without calls;
    then it sleeps on the condition until a call is submitted. Without the
    extension, or with ``grace`` 0, each submit wakes the thread at once.

    Args:
      name: the progress thread's name.
      grace: seconds without a new call before the thread takes the queue (the tuning table's
        async_grace_us).
      patience: seconds the oldest queued call waits at most (async_patience_us).
      awake: seconds the thread keeps waiting in C after the last call.
    """

    def __init__(self, name: str, grace: float = 0.0, patience: float = 0.0, awake: float = 0.02):
        self._name = name
        self._lock = threading.Lock()  # taken bare (a C-level with) on the fast lane
        self._cv = threading.Condition(self._lock)
        self._queue: deque = deque()  # (fn, Work, when queued in ns)
        self._inflight = 0  # queued or running on the thread
        self._inline = False  # a blocking call is running on its caller's thread
        self._thread: threading.Thread | None = None
        self._closed = False
        self._drainers = 0  # threads in drain()
        self._hurry = False  # take the queue without the grace (a waiter blocks, drain, close)
        self._sleeping = False  # the thread waits on the condition: submit notifies it
        self._gate = _GATE if grace > 0 else None
        self._grace, self._patience = float(grace), max(float(patience), float(grace))
        self._awake = max(float(awake), self._patience)
        # what the C gate reads: [unclaimed calls, oldest's time, the caller's latest submit or stolen
        # call, attention]
        self._words = np.zeros(4, np.int64)
        self._at = self._words.ctypes.data

    def _claimed(self) -> None:
        """The head call left the queue (lock held): the gate sees the next one's time."""
        w = self._words
        w[0] -= 1
        if self._queue:
            w[1] = self._queue[0][2]

    def _attend(self) -> None:
        """(lock held) The thread looks at the queue now, without the grace."""
        self._hurry = True
        self._words[3] = 1
        self._cv.notify_all()

    def submit(self, fn, label: str) -> Work:
        work = Work(label, self)
        now = time.monotonic_ns()
        with self._lock:  # (the Condition's own lock, taken bare: its Python methods cost ~1 us each)
            if self._closed:
                raise RuntimeError(f"{self._name}: communicator is closed ({label})")
            self._inflight += 1
            self._queue.append((fn, work, now))
            work._queued = True
            w = self._words
            if w[0] == 0:
                w[1] = now
            w[0] += 1
            w[2] = now
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            elif self._gate is None or self._sleeping:
                # the thread (one waiter suffices: drain() waits for _inflight to fall, not rise)
                self._cv.notify_all() if self._drainers else self._cv.notify()
        return work

    def hurry(self) -> None:
        """A thread is about to block on a queued call: the progress thread takes it now."""
        with self._lock:
            if self._queue:
                self._attend()

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
        """Run the queue on the calling thread, head first, up to and including
        ``work``, while nothing runs on the progress thread (so call order holds);
        True when ``work`` ran here. A caller waiting on the last of several
        queued calls (DDP's buckets, a batch of async calls) so runs them all
        without a hand-off per call. Their callbacks run here too; an earlier
        call's error goes to its own Work, as from the thread."""
        while True:
            with self._lock:
                if self._inline or not work._queued or self._inflight != len(self._queue):
                    return False  # ours left the queue, or the progress thread is running one
                fn, head, _ = self._queue.popleft()
                head._queued = False
                self._claimed()
                self._words[2] = time.monotonic_ns()  # the caller is at work: the thread stays out
                self._inline = True
            try:
                result, error = fn(), None
            except BaseException as e:  # handed to the waiter, as from the thread
                result, error = None, e
            finally:
                fn = None
                with self._lock:
                    self._inline = False
                    self._inflight -= 1
                    if self._queue or self._drainers:  # the thread waits for queued work; drain() for none
                        self._cv.notify_all()
            head._finish(result, error)
            if head is work:
                return True
            head = result = error = None

    def drain(self) -> None:
        """Wait until everything queued so far has run."""
        with self._cv:
            self._drainers += 1
            if self._queue:
                self._attend()
            try:
                self._cv.wait_for(lambda: self._inflight == 0)
            finally:
                self._drainers -= 1

    def _next(self):
        """(fn, work) of the thread's next call, or None once closed with nothing queued;
        the lock held. Never beside an inline call, closed or not."""
        while True:
            self._words[3] = 0
            if self._closed and not self._queue:
                return None
            now = time.monotonic_ns()
            if self._queue and not self._inline and (self._gate is None or self._hurry or self._closed
                                                     or now - self._words[2] >= self._grace * 1e9
                                                     or now - self._queue[0][2] >= self._patience * 1e9):
                self._hurry = False
                fn, work, _ = self._queue.popleft()
                work._queued = False
                self._claimed()
                return fn, work
            if self._queue and self._inline and self._gate is not None:
                self._cv.wait(self._grace)  # a call runs inline (leave_inline notifies)
                continue
            if self._gate is None or not (self._queue or now - self._words[2] < self._awake * 1e9):
                self._sleeping = True  # (nothing queued for a while, or an inline call: notified)
                try:
                    self._cv.wait()
                finally:
                    self._sleeping = False
                continue
            self._lock.release()  # calls keep coming: wait in C, the GIL released
            try:
                self._gate(self._at, self._grace, self._patience, self._awake)
            finally:
                self._lock.acquire()

    def _loop(self) -> None:
        _work._local.progress = True
        while True:
            with self._cv:
                got = self._next()
            if got is None:
                return
            fn, work = got
            got = None
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
            self._attend()
        if self._thread is not None:
            self._thread.join()

