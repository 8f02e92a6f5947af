"""Point-to-point over torch's Gloo: the transport of a store world (torchrun, mp.spawn).

Gloo's send and receive Work say they are complete only to a caller blocked in
``wait()`` (``is_completed()`` stays False and there is no future), so a small
pool of threads does the waiting: one per channel (direction, peer, tag) in
use, waiting on that channel's operations in post order. Gloo matches the
operations of one channel in that order, so none waits behind one that
completes later; a thread with nothing to wait for exits after ``IDLE_S``.
``test`` and ``testall`` only read the flag the thread sets and never block;
when an operation is not done yet they let go of the interpreter lock for a
moment, so that its thread can set the flag.

Gloo cannot withdraw a posted operation: ``cancel`` leaves them posted, and
reports every one as not cancelled (its buffer must stay alive:
Context.abandon keeps it in ``orphans``). ``close`` waits ``CLOSE_GRACE_S``
for what is still posted, then releases the rest: a receive that times out
makes Gloo close that pair, which fails every operation on it on both sides,
so every waiting thread returns before the Gloo group shuts down. A transport
never closed is closed at interpreter exit (a thread left blocked in Gloo
aborts the process there).

Gloo has no probe either. Messages on ``COUNTED_TAGS`` (the census's notices,
the only ones anything probes) also count up a number in the store for their
receiver; ``probe`` compares it with the receives posted (at most every
``PROBE_EVERY_S``).
"""
from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import deque
from datetime import timedelta

import numpy as np

from ..errors import CollectiveError
from ..tuning import defaults
from ..waiting import WaitPolicy

IDLE_S = 2.0  # a channel's thread exits after this long with nothing to wait for
CLOSE_GRACE_S = 1.0  # close() lets posted operations finish this long before it releases them
PROBE_EVERY_S = 5e-3  # probe() asks the store at most this often
COUNTED_TAGS = frozenset({13})  # safety/census.py's TAG_CENSUS
RELEASE_TAG = (1 << 30) + 13  # the receive whose timeout closes a pair (no algorithm uses it)


class _Op:
    """One posted send or receive: its Gloo Work, the tensor it reads or fills, and
    what its thread learned (``done``, then ``error`` if it failed)."""

    __slots__ = ("work", "keep", "what", "done", "error")

    def __init__(self, work, keep, what: str):
        self.work, self.keep, self.what = work, keep, what
        self.done, self.error = False, None


class _Done:
    done, error = True, None


_DONE = _Done()


class _Channel:
    __slots__ = ("queue", "cv", "current")

    def __init__(self, lock):
        self.queue, self.cv, self.current = deque(), threading.Condition(lock), None


def _tensor(buf: np.ndarray):
    """The bytes of a 1-D contiguous array as a CPU tensor over the same memory (a copy
    of a read-only one: torch tensors are writable)."""
    import torch
    b = buf.reshape(-1).view(np.uint8)
    return torch.from_numpy(b if b.flags.writeable else b.copy())


class GlooTransport:
    """Sends and receives on a Gloo process group of their own.

    Args:
      pg: a ``torch.distributed.ProcessGroupGloo`` of these ranks, used by nothing else
        (its tags are ours alone).
      store: a store every rank shares (a PrefixStore of this transport's), for probe counts.
      busy: (oversubscribed, core_bound) of this rank (waiting.busy_policy).
      tuning: the settings its waits follow (waiting.py); the built-in ones when None.
    """

    def __init__(self, pg, store, busy: tuple[bool, bool], tuning=None):
        self.pg, self.store = pg, store
        self.rank, self.size = pg.rank(), pg.size()
        self.oversubscribed, self.core_bound = busy
        self.policy = WaitPolicy(tuning if tuning is not None else defaults(), *busy)
        self.orphans = []  # operations of a collective that failed: kept alive (see Context.abandon)
        self.fault = None  # test-only hook: fault(kind, peer, tag) -> True drops the message
        self._lock = threading.Lock()
        self._channels: dict = {}
        self._threads: set = set()
        self._closed = False
        self._posted: dict = {}  # counted tag -> receives posted
        self._next_look = 0.0
        self._at_exit = _closer(weakref.ref(self))
        atexit.register(self._at_exit)

    @classmethod
    def connect(cls, store, prefix: str, rank: int, size: int, busy, tuning=None, wait_s: float = 3600.0):
        """A Gloo group of ``size`` ranks under ``prefix`` in ``store`` (every rank calls it,
        once every rank is known to be there: a bootstrap barrier). ``wait_s`` bounds Gloo's
        own waits; keep it above every collective's deadline."""
        import torch.distributed as dist
        pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix + "/pg/", store), rank, size, timedelta(seconds=wait_s))
        return cls(pg, dist.PrefixStore(prefix + "/heard/", store), busy, tuning)

    # ------------------------------------------------------------------ posting
    def isend(self, buf: np.ndarray, peer: int, tag: int):
        if self.fault is not None and self.fault("send", peer, tag):
            return _DONE
        t = _tensor(buf)
        op = _Op(self.pg.send([t], peer, tag), t, f"send to rank {peer} (tag {tag})")
        if tag in COUNTED_TAGS:
            self.store.add(f"{tag}/{peer}", 1)
        self._wait_on(("send", peer, tag), op)
        return op

    def irecv(self, buf: np.ndarray, peer: int, tag: int):
        b = buf.reshape(-1).view(np.uint8)
        import torch
        t = torch.from_numpy(b)
        op = _Op(self.pg.recv([t], peer, tag), t, f"receive from rank {peer} (tag {tag})")
        if tag in COUNTED_TAGS:
            self._posted[tag] = self._posted.get(tag, 0) + 1
        self._wait_on(("recv", peer, tag), op)
        return op

    def _wait_on(self, key, op: _Op) -> None:
        with self._lock:
            if self._closed:
                raise CollectiveError(f"rank {self.rank}: {op.what} on a closed Gloo transport")
            ch = self._channels.get(key)
            if ch is None:
                ch = self._channels[key] = _Channel(self._lock)
                th = threading.Thread(target=self._serve, args=(key, ch), daemon=True,
                                      name=f"gloo-wait-r{self.rank}-{key[0]}{key[1]}-t{key[2]}")
                self._threads.add(th)
                th.start()
            ch.queue.append(op)
            ch.cv.notify()

    def _serve(self, key, ch: _Channel) -> None:
        """One channel's thread: wait on its operations in post order."""
        while True:
            with self._lock:
                while not ch.queue:
                    if self._closed or (not ch.cv.wait(IDLE_S) and not ch.queue):
                        if self._channels.get(key) is ch:
                            del self._channels[key]
                        self._threads.discard(threading.current_thread())
                        return
                op = ch.current = ch.queue.popleft()
            try:
                op.work.wait()
            except Exception as e:  # noqa: BLE001  the caller's test() raises it
                op.error = CollectiveError(f"rank {self.rank}: Gloo {op.what} failed: {e}")
            op.done = True
            ch.current = None

    # ------------------------------------------------------------------ progress
    @staticmethod
    def test(handle) -> bool:
        if not handle.done:
            time.sleep(0)  # lets go of the interpreter lock: the waiting thread may be about to set the flag
            if not handle.done:
                return False
        if handle.error is not None:
            raise handle.error
        return True

    @classmethod
    def testall(cls, handles) -> bool:
        for h in handles:
            if not h.done:
                time.sleep(0)
                if not h.done:
                    return False
        for h in handles:
            if h.error is not None:
                raise h.error
        return True

    def probe(self, tag: int) -> bool:
        """Whether a message with ``tag`` from any rank waits for a receive (counted tags only)."""
        now = time.monotonic()
        if tag not in COUNTED_TAGS or now < self._next_look:
            return False
        self._next_look = now + PROBE_EVERY_S
        return self.store.add(f"{tag}/{self.rank}", 0) > self._posted.get(tag, 0)

    def cancel(self, handles) -> list[int]:
        """Gloo cannot withdraw an operation: every one stays posted (a receive may still
        write its buffer) and is reported as not cancelled, as MpiTransport.cancel reports
        those it could not cancel. ``close`` releases those still posted then."""
        return [i for i, h in enumerate(handles) if h is not _DONE]

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Release every waiting thread, then shut the Gloo group down."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._at_exit)
        end = time.monotonic() + CLOSE_GRACE_S
        while time.monotonic() < end and self._pending_peers():
            time.sleep(1e-3)
        for peer in sorted(self._pending_peers()):
            self._close_pair(peer)
        with self._lock:
            for ch in self._channels.values():
                ch.cv.notify_all()
            threads = list(self._threads)
        for th in threads:
            th.join(CLOSE_GRACE_S)
        try:
            self.pg.shutdown()
        except Exception:  # noqa: BLE001  a pair closed above may make Gloo complain; it is shut either way
            pass
        self.orphans.clear()

    def _pending_peers(self) -> set[int]:
        with self._lock:
            return {key[1] for key, ch in self._channels.items() if ch.queue or ch.current is not None}

    def _close_pair(self, peer: int) -> None:
        import torch
        try:
            self.pg.recv([torch.zeros(1, dtype=torch.uint8)], peer, RELEASE_TAG).wait(timedelta(milliseconds=1))
        except Exception:  # noqa: BLE001  the timeout is the point: Gloo closes the pair
            pass


def _closer(ref):
    def close_at_exit():
        t = ref()
        if t is not None:
            t.close()
    return close_at_exit
