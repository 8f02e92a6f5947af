"""One send or receive of a device buffer, per mode: staged, CUDA-aware MPI, CUDA IPC."""
from __future__ import annotations

import time

import numpy as np

from ...errors import CollectiveError

ACK_TAG_OFFSET = 16384  # acks travel on tag + this (MPI guarantees tags up to 32767)
_CTRL_WORDS = 4 + 8 + 8  # nbytes, offset, start, signalled, the buffer's 64-byte IPC handle, the sender's event's
_ACK_WORDS = 1 + 8  # 1: copied (host-polled), 2: copy queued, then the receiver's event's 64-byte IPC handle


class _Op:
    """One send or receive; ``step`` moves it on, ``ordered`` once its MPI
    message is posted (later operations of its channel wait for that)."""

    ordered = False
    done = False
    error = None  # raised when this operation's handle is tested, as MPI reports a request's error

    def __init__(self, t: "DeviceTransport", buf, peer: int, tag: int):
        self.t, self.buf, self.peer, self.tag = t, buf, peer, tag
        self.nbytes = buf.nbytes
        self.reqs: list = []
        self.prof = t.profile  # profile.Profile or None
        self.since = time.perf_counter() if self.prof is not None else 0.0

    def mark(self, what: str) -> None:
        """With a profile: the time since the last mark (or the post) goes to phase ``what``."""
        if self.prof is not None:
            now = time.perf_counter()
            self.prof.add(what, now - self.since)
            self.since = now

    def cancel(self) -> None:
        self.t.host.cancel([r for r in self.reqs if r is not None])


class _StagedSend(_Op):
    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        b = t.backend
        self.host = b.pinned(self.nbytes)
        self.copied = b.d2h(self.host, buf, b.record(buf))

    def step(self):
        if not self.ordered and self.copied.done():
            self.mark("send.d2h_wait")
            self.reqs.append(self.t.host.isend(self.host, self.peer, self.tag))
            self.ordered = True
        if self.ordered and self.t.host.test(self.reqs[0]):
            self.mark("send.ack_wait")
            self.host, self.done = None, True


class _StagedRecv(_Op):
    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        b = t.backend
        self.free = b.record(buf)  # queued kernels that still use buf
        self.host = b.pinned(self.nbytes)
        self.reqs.append(t.host.irecv(self.host, peer, tag))
        self.ordered = True
        self.landed = None

    def step(self):
        if self.landed is None:
            if self.t.host.test(self.reqs[0]):
                self.mark("recv.ctrl_wait")
                self.landed = self.t.backend.h2d(self.buf, self.host, self.free)
        elif self.landed.done():
            self.mark("recv.copy_wait")
            self.host, self.done = None, True


class _DirectSend(_Op):
    """CUDA-aware MPI: the library reads the device buffer once its data is final."""

    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        self.ready = t.backend.record(buf)

    def step(self):
        if not self.ordered and self.ready.done():
            self.mark("send.ready_wait")
            self.reqs.append(self.t.host.isend(self.buf, self.peer, self.tag))
            self.ordered = True
        if self.ordered and self.t.host.test(self.reqs[0]):
            self.mark("send.ack_wait")
            self.done = True


class _DirectRecv(_Op):
    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        self.free = t.backend.record(buf)

    def step(self):
        if not self.ordered and self.free.done():
            self.mark("recv.free_wait")
            self.reqs.append(self.t.host.irecv(self.buf, self.peer, self.tag))
            self.ordered = True
        if self.ordered and self.t.host.test(self.reqs[0]):
            self.mark("recv.ctrl_wait")
            self.done = True


def _words(handle: bytes) -> np.ndarray:
    return np.frombuffer(handle.ljust(64, b"\0")[:64], np.int64)


def _ctrl(nbytes: int, offset: int, handle: bytes, start: int = 0, signal: bytes | None = None) -> np.ndarray:
    """The IPC control message: nbytes, offset, the allocation's start in the sender, 1 when
    the sender signalled (its event's handle follows the buffer's), the 64-byte buffer handle,
    the 64-byte event handle."""
    msg = np.zeros(_CTRL_WORDS, np.int64)
    msg[0], msg[1], msg[2] = nbytes, offset, np.uint64(start).astype(np.int64)
    msg[4:12] = _words(handle)
    if signal is not None:
        msg[3] = 1
        msg[12:20] = _words(signal)
    return msg


class _IpcSend(_Op):
    """Stream waits (``t.stream_waits``, the default): the control message leaves at once with
    an IPC event recorded after the buffer's producer; the receiver's stream waits on it, copies,
    records its own and acks with that; our stream waits on it before anything later touches the
    buffer. No host wait on the GPU. Without: the sender host-polls its producer's event before
    the control message, and the receiver host-polls the copy before it acks."""

    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        if t.stream_waits:
            self.signal = t.backend.signal(buf) if self.nbytes else None
            self.ready = _Ready()
        else:
            self.signal, self.ready = None, t.backend.record(buf)

    def step(self):
        t = self.t
        if not self.ordered and self.ready.done():
            self.mark("send.ready_wait")
            handle, offset, start = t.backend.export(self.buf) if self.nbytes else (b"", 0, 0)
            self.msg = _ctrl(self.nbytes, offset, handle, start, self.signal)
            self.ack = np.zeros(_ACK_WORDS, np.int64)
            self.reqs += [t.host.isend(self.msg, self.peer, self.tag),
                          t.host.irecv(self.ack, self.peer, self.tag + ACK_TAG_OFFSET)]
            self.ordered = True
        if self.ordered and t.host.testall(self.reqs):
            if self.ack[0] == 2:  # the copy is queued in the receiver: order our later work after it
                t.backend.wait_signal(self.buf, self.ack[1:].tobytes())
            self.mark("send.ack_wait")
            self.done = True  # buf is ours again (on our stream, after the receiver's copy)


class _IpcRecv(_Op):
    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        self.msg = np.zeros(_CTRL_WORDS, np.int64)
        self.reqs.append(t.host.irecv(self.msg, peer, tag))
        self.ordered = True
        self.copied = None
        self.acked = None

    def step(self):
        t = self.t
        if self.copied is None:
            if not t.host.test(self.reqs[0]):
                return
            self.mark("recv.ctrl_wait")
            nbytes, offset = int(self.msg[0]), int(self.msg[1])
            if nbytes > self.nbytes:  # shorter is fine, as in MPI
                raise CollectiveError(f"rank {t.rank}: message from rank {self.peer} (tag {self.tag}) has "
                                      f"{nbytes} bytes, the receive has room for {self.nbytes}")
            handle = self.msg[4:12].tobytes()
            owner = (self.peer, int(self.msg[2]))
            if self.msg[3] == 1 and nbytes:  # the sender's data is final once its event is: our stream waits
                t.backend.wait_signal(self.buf, self.msg[12:20].tobytes())
            self.copied = t.backend.pull(self.buf, handle, offset, nbytes, owner) if nbytes else _Ready()
            self.mark("recv.pull_issue")
            self.ack = np.zeros(_ACK_WORDS, np.int64)
            if t.stream_waits and nbytes:  # ack now: the copy is queued; the sender's stream waits for it
                self.ack[0] = 2
                self.ack[1:] = _words(t.backend.signal(self.buf))
                self.copied = _Ready()  # later work on our stream is ordered after the copy
        if self.acked is None and self.copied.done():
            self.mark("recv.copy_wait")
            if self.ack[0] == 0:
                self.ack[0] = 1
            self.acked = t.host.isend(self.ack, self.peer, self.tag + ACK_TAG_OFFSET)
            self.reqs.append(self.acked)
        if self.acked is not None and t.host.test(self.acked):
            self.mark("recv.ack_send")
            self.done = True


class _Ready:
    @staticmethod
    def done() -> bool:
        return True


_OPS = {"staged": (_StagedSend, _StagedRecv), "cuda_aware": (_DirectSend, _DirectRecv),
        "ipc": (_IpcSend, _IpcRecv)}


