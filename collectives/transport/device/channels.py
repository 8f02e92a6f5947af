"""DeviceTransport: the host transport's interface for device buffers, one FIFO channel per
(direction, peer, tag)."""
from __future__ import annotations

from collections import defaultdict, deque

from .backend import CupyBackend
from .detect import MODES, choose_mode
from .protocols import _OPS, ACK_TAG_OFFSET


class DeviceTransport:
    """The transport interface for device buffers; host buffers pass straight to ``host``.

    Args:
      host: the host transport (MpiTransport, or InProcTransport in tests).
      mode: "cuda_aware", "ipc" or "staged" (see choose_mode for "auto").
      backend: the GPU calls (CupyBackend by default).
      stream_waits: ipc mode orders its copies with interprocess events and stream
        waits instead of host polls of events (see protocols._IpcSend); None: the
        tuning table's ipc_stream_waits (RINGZERO_IPC_STREAM_WAITS). Ranks may differ.
    """

    def __init__(self, host, mode: str, backend=None, stream_waits: bool | None = None):
        if mode not in MODES:
            raise ValueError(f"unknown device transport mode {mode!r}; choose from {', '.join(MODES)}")
        self.host, self.mode = host, mode
        self.backend = backend if backend is not None else CupyBackend()
        self.rank, self.size = host.rank, host.size
        self.policy = host.policy  # waits follow the host transport's policy (waiting.py)
        self.fault = None
        self.profile = None  # a profile.Profile to see where each message's time goes (off: None)
        if stream_waits is None:
            from ...tuning import load
            stream_waits = bool(load().ipc_stream_waits)
        self.stream_waits = bool(stream_waits) and mode == "ipc"
        self.orphans = []  # operations cancelled after an error: kept, with their staging buffers, never reused
        self._send_cls, self._recv_cls = _OPS[mode]
        self._channels: dict = defaultdict(deque)

    def _post(self, cls, kind, buf, peer, tag):
        if not 0 <= tag < ACK_TAG_OFFSET:
            raise ValueError(f"tag {tag} out of range for the device transport (0..{ACK_TAG_OFFSET - 1})")
        op = cls(self, buf.reshape(-1), peer, tag)
        op.channel = self._channels[(kind, peer, tag)]
        op.channel.append(op)
        self._advance(op.channel)
        return op

    def isend(self, buf, peer: int, tag: int):
        if not self.backend.is_device(buf):
            return _HostHandle(self.host.isend(buf, peer, tag))
        return self._post(self._send_cls, "send", buf, peer, tag)

    def irecv(self, buf, peer: int, tag: int):
        if not self.backend.is_device(buf):
            return _HostHandle(self.host.irecv(buf, peer, tag))
        return self._post(self._recv_cls, "recv", buf, peer, tag)

    @staticmethod
    def _advance(channel: deque) -> None:
        for op in channel:
            if not op.done:
                try:
                    op.step()
                except Exception as e:  # e.g. truncation: it belongs to this op, not to whoever polled
                    op.error, op.done, op.ordered = e, True, True
            if not op.ordered:
                break  # later messages of this channel must not overtake it
        while channel and channel[0].done:
            channel.popleft()

    def progress(self) -> None:
        """Move every pending operation on. Waiting on a receive must also push
        this rank's sends out (the peer may be waiting for them), as an MPI
        progress engine does."""
        for key in list(self._channels):
            ch = self._channels[key]
            self._advance(ch)
            if not ch:
                del self._channels[key]

    def test(self, handle) -> bool:
        if isinstance(handle, _HostHandle):
            self.progress()
            return self.host.test(handle.req)
        if not handle.done:
            self.progress()
        if handle.error is not None:
            raise handle.error
        return handle.done

    def testall(self, handles) -> bool:
        self.progress()
        done = True
        for h in handles:
            if isinstance(h, _HostHandle):
                done = self.host.test(h.req) and done
            elif h.error is not None:
                raise h.error
            else:
                done = done and h.done
        return done

    def cancel(self, handles) -> None:
        for h in handles:
            if isinstance(h, _HostHandle):
                self.host.cancel([h.req])
            elif not h.done:
                h.cancel()
                h.done = True
                try:
                    h.channel.remove(h)
                except ValueError:
                    pass

    def close(self) -> None:
        """Release IPC mappings; the host transport is closed by its owner."""
        self._channels.clear()
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()


class _HostHandle:
    __slots__ = ("req",)

    def __init__(self, req):
        self.req = req


def make_device_transport(host_transport, mode: str = "auto", *, bootstrap=None, backend=None,
                          stream_waits: bool | None = None) -> DeviceTransport:
    """The device transport over ``host_transport`` (returned as is if it already is one).

    Args:
      host_transport: an MpiTransport (or any transport, with an explicit mode).
      mode: "auto" (see choose_mode: needs ``bootstrap``), "cuda_aware", "ipc" or "staged".
      bootstrap: the ranks' bootstrap, for "auto".
      backend: the GPU calls; CupyBackend unless a test passes a fake.
      stream_waits: see DeviceTransport.
    """
    if isinstance(host_transport, DeviceTransport):
        return host_transport
    if backend is None:
        backend = CupyBackend()
    return DeviceTransport(host_transport, choose_mode(bootstrap, mode), backend, stream_waits)
