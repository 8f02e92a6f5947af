"""In-process transport: N simulated ranks as threads sharing one Fabric.

Unit tests and ``python -m collectives.teach.explain`` run the real ring code on it
without mpirun. Sends copy their bytes at once (eager), receives complete
when a matching message is there; matching follows post order per
(source, destination, tag), as in MPI. A message longer than its receive
fails that receive when it is tested, as MPI's truncation error does (not
in the sender's thread, and not if the receive is cancelled untested).
"""
from __future__ import annotations

import threading
from collections import defaultdict, deque

import numpy as np

from ..errors import CollectiveError
from ..tuning import defaults
from ..waiting import WaitPolicy


class _Recv:
    __slots__ = ("buf", "key", "done", "error")

    def __init__(self, buf: np.ndarray, key):
        self.buf, self.key, self.done, self.error = buf, key, False, None


class _Done:
    done = True


_DONE = _Done()


class Fabric:
    """The shared wire of a simulated group of ``world`` ranks."""

    def __init__(self, world: int):
        self.world = world
        self.lock = threading.Lock()
        self.messages = defaultdict(deque)  # (src, dst, tag) -> bytes waiting
        self.posted = defaultdict(deque)  # (src, dst, tag) -> receives waiting

    def transport(self, rank: int) -> "InProcTransport":
        return InProcTransport(self, rank)

    def _match(self, key) -> None:
        msgs, recvs = self.messages[key], self.posted[key]
        while msgs and recvs:
            data, r = msgs.popleft(), recvs.popleft()
            dst = r.buf.reshape(-1).view(np.uint8)
            if data.size > dst.size:  # MPI's truncation error: reported when the receive is tested
                r.error = CollectiveError(
                    f"rank {key[1]}: message from rank {key[0]} (tag {key[2]}) has "
                    f"{data.size} bytes, the receive has room for {dst.size}")
            else:
                dst[:data.size] = data
            r.done = True


class InProcTransport:
    def __init__(self, fabric: Fabric, rank: int):
        self.fabric, self.rank, self.size = fabric, rank, fabric.world
        self.fault = None  # test-only hook, as in MpiTransport
        self.oversubscribed = True  # ranks are threads sharing the GIL: waits must not spin
        self.core_bound = True
        self.policy = WaitPolicy(defaults(), True, True)

    def isend(self, buf: np.ndarray, peer: int, tag: int):
        if self.fault is not None and self.fault("send", peer, tag):
            return _DONE
        key = (self.rank, peer, tag)
        data = buf.reshape(-1).view(np.uint8).copy()
        with self.fabric.lock:
            self.fabric.messages[key].append(data)
            self.fabric._match(key)
        return _DONE

    def irecv(self, buf: np.ndarray, peer: int, tag: int):
        r = _Recv(buf, (peer, self.rank, tag))
        with self.fabric.lock:
            self.fabric.posted[r.key].append(r)
            self.fabric._match(r.key)
        return r

    def probe(self, tag: int) -> bool:
        """Whether a message with ``tag`` from any rank is waiting to be received."""
        msgs = self.fabric.messages
        with self.fabric.lock:
            return any(msgs.get((q, self.rank, tag)) for q in range(self.size))

    @staticmethod
    def test(handle) -> bool:
        if handle.done and getattr(handle, "error", None) is not None:
            raise handle.error
        return handle.done

    @classmethod
    def testall(cls, handles) -> bool:
        return all([cls.test(h) for h in handles])

    def cancel(self, handles) -> list[int]:
        """Withdraw the receives not yet matched; return the positions of the
        receives that had matched (their bytes landed), as MpiTransport.cancel."""
        landed = []
        with self.fabric.lock:
            for i, h in enumerate(handles):
                if isinstance(h, _Recv):
                    if h.done:
                        landed.append(i)
                        continue
                    try:
                        self.fabric.posted[h.key].remove(h)
                    except ValueError:
                        pass
        return landed

    def close(self) -> None:
        pass
