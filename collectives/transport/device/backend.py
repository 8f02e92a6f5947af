"""The GPU calls the device transport's protocols need, through cupy (tests pass a fake)."""
from __future__ import annotations

import ctypes
from collections import OrderedDict

import numpy as np

from ...errors import CollectiveError

MAX_CACHED = 128  # IPC handles exported, and peers' allocations mapped, kept per process


class _CudaEvent:
    __slots__ = ("ev",)

    def __init__(self, ev):
        self.ev = ev

    def done(self) -> bool:
        return self.ev.done


class CupyBackend:
    """The GPU calls the protocols need, through cupy."""

    def __init__(self):
        try:
            import cupy
        except ImportError as e:
            raise RuntimeError(f"device arrays need cupy: pip install 'ringzero[gpu]' ({e})") from e
        self.cp = cupy
        self._copy_streams: dict = {}
        self._opened: OrderedDict = OrderedDict()  # (device, handle) -> [mapped base, last copy's event, owner]
        self._owners: dict = {}  # (device, peer, peer's allocation start) -> key in _opened
        self._exports: OrderedDict = OrderedDict()  # (device, buffer id) -> IPC handle
        self._libcuda = None
        self._signals: dict = {}  # device -> (our interprocess event, its IPC handle)
        self._peer_signals: dict = {}  # (device, handle) -> a peer's event, opened here
        self.stats = {"exports": 0, "handles_made": 0, "pulls": 0, "mappings_opened": 0, "mappings_closed": 0,
                      "signals": 0, "signal_waits": 0}

    def is_device(self, buf) -> bool:
        return type(buf).__module__.startswith("cupy")

    def _stream(self, dev: int, direction: str):
        """The copy stream of one direction ("d2h" or "h2d") on ``dev``: two, so that
        uploads never queue behind downloads (the copy engines run both at once)."""
        s = self._copy_streams.get((dev, direction))
        if s is None:
            with self.cp.cuda.Device(dev):
                s = self._copy_streams[(dev, direction)] = self.cp.cuda.Stream(non_blocking=True)
        return s

    def streams_used(self) -> list:
        """The copy streams made so far, as (device, direction, stream pointer)."""
        return [(dev, d, s.ptr) for (dev, d), s in self._copy_streams.items()]

    def record(self, buf) -> _CudaEvent:
        """An event after everything queued so far on buf's device's default stream."""
        cp = self.cp
        with cp.cuda.Device(buf.device.id):
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(cp.cuda.Stream.null)
        return _CudaEvent(ev)

    def pinned(self, nbytes: int) -> np.ndarray:
        """A page-locked host buffer (from cupy's pinned pool; freed with the array)."""
        if nbytes == 0:
            return np.empty(0, np.uint8)
        mem = self.cp.cuda.alloc_pinned_memory(nbytes)
        return np.frombuffer(mem, np.uint8, nbytes)

    def _copy(self, dst_ptr, src_ptr, nbytes, kind, dev, after):
        cp = self.cp
        with cp.cuda.Device(dev):
            s = self._stream(dev, "d2h" if kind == 2 else "h2d")
            s.wait_event(after.ev)
            if nbytes:
                cp.cuda.runtime.memcpyAsync(dst_ptr, src_ptr, nbytes, kind, s.ptr)
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(s)
        return _CudaEvent(ev)

    def d2h(self, host: np.ndarray, buf, after) -> _CudaEvent:
        return self._copy(host.ctypes.data, buf.data.ptr, buf.nbytes, 2, buf.device.id, after)

    def h2d(self, buf, host: np.ndarray, after) -> _CudaEvent:
        return self._copy(buf.data.ptr, host.ctypes.data, buf.nbytes, 1, buf.device.id, after)

    def _range(self, ptr: int) -> tuple[int, int, int]:
        """(start, size, buffer id) of the cudaMalloc allocation holding ptr, in one driver call.
        The buffer id is unique for the allocation's lifetime, so a freed range that is
        allocated again gets a new one (and a new IPC handle)."""
        if self._libcuda is None:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuPointerGetAttributes
            fn.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p),
                           ctypes.c_uint64]
            fn.restype = ctypes.c_int
            self._libcuda = fn
        start, size, ident = ctypes.c_uint64(0), ctypes.c_size_t(0), ctypes.c_uint64(0)
        attrs = (ctypes.c_int * 3)(11, 12, 7)  # RANGE_START_ADDR, RANGE_SIZE, BUFFER_ID
        data = (ctypes.c_void_p * 3)(*(ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in (start, size, ident)))
        rc = self._libcuda(3, attrs, data, ctypes.c_uint64(ptr))
        if rc != 0:
            raise CollectiveError(f"cuPointerGetAttributes failed (CUresult {rc}) for pointer {ptr:#x}")
        return start.value, size.value, ident.value

    def export(self, buf) -> tuple[bytes, int, int]:
        """(IPC handle of buf's allocation, buf's byte offset in it, the allocation's start).

        Handles are cached per allocation (by its buffer id): after the first message
        from an allocation, an export is one attribute query, no ipcGetMemHandle."""
        dev = buf.device.id
        with self.cp.cuda.Device(dev):
            ptr = buf.data.ptr
            start, _, ident = self._range(ptr)
            key = (dev, ident)
            handle = self._exports.get(key)
            self.stats["exports"] += 1
            if handle is None:
                self.stats["handles_made"] += 1
                handle = self._exports[key] = bytes(self.cp.cuda.runtime.ipcGetMemHandle(start))
                while len(self._exports) > MAX_CACHED:
                    self._exports.popitem(last=False)
            else:
                self._exports.move_to_end(key)
            return handle, ptr - start, start

    def signal(self, buf) -> bytes:
        """Record this process's interprocess event on buf's device's default stream (after
        everything queued there) and return its IPC handle, for a peer's :meth:`wait_signal`.

        One event per device, recorded again for every message: a peer's stream wait takes
        the latest record when it is queued, which is never earlier than the one made for
        its message, so waiting on a later one is only stronger (and cannot deadlock: each
        wait names a record that was already queued)."""
        cp = self.cp
        dev = buf.device.id
        with cp.cuda.Device(dev):
            sig = self._signals.get(dev)
            if sig is None:
                ev = cp.cuda.Event(block=False, disable_timing=True, interprocess=True)
                sig = self._signals[dev] = (ev, bytes(cp.cuda.runtime.ipcGetEventHandle(ev.ptr)))
            sig[0].record(cp.cuda.Stream.null)
            self.stats["signals"] += 1
            return sig[1]

    def wait_signal(self, buf, handle: bytes) -> None:
        """Make buf's device's default stream wait for a peer's latest :meth:`signal` (no host wait)."""
        cp = self.cp
        dev = buf.device.id
        with cp.cuda.Device(dev):
            key = (dev, handle)
            ev = self._peer_signals.get(key)
            if ev is None:
                ev = self._peer_signals[key] = cp.cuda.runtime.ipcOpenEventHandle(handle)
            cp.cuda.runtime.streamWaitEvent(cp.cuda.Stream.null.ptr, ev, 0)
            self.stats["signal_waits"] += 1

    def pull(self, dst, handle: bytes, offset: int, nbytes: int, owner=None) -> _CudaEvent:
        """Copy nbytes from a peer's allocation into dst, on dst's default stream.

        Mappings are cached (cupy's pool reuses allocations), at most MAX_CACHED of
        them, least recently used closed first. ``owner`` = (peer, the allocation's
        start in the peer): a new handle for the same owner means the peer freed that
        allocation and made another at the same address, so the old mapping is closed."""
        cp = self.cp
        dev = dst.device.id
        with cp.cuda.Device(dev):
            key = (dev, handle)
            entry = self._opened.get(key)
            self.stats["pulls"] += 1
            if entry is None:
                self.stats["mappings_opened"] += 1
                if owner is not None:
                    stale = self._owners.get((dev, *owner))
                    if stale is not None and stale != key:
                        self._release(stale)
                    self._owners[(dev, *owner)] = key
                entry = self._opened[key] = [cp.cuda.runtime.ipcOpenMemHandle(handle, 1), None, owner]
                while len(self._opened) > MAX_CACHED:
                    self._release(next(iter(self._opened)))
            else:
                self._opened.move_to_end(key)
            if nbytes:
                cp.cuda.runtime.memcpyAsync(dst.data.ptr, entry[0] + offset, nbytes, 4, cp.cuda.Stream.null.ptr)
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(cp.cuda.Stream.null)
            entry[1] = ev  # the mapping is closed only after this copy
        return _CudaEvent(ev)

    def _release(self, key) -> None:
        """Close one mapping once the last copy from it has finished."""
        base, last, owner = self._opened.pop(key)
        self.stats["mappings_closed"] += 1
        dev = key[0]
        if owner is not None and self._owners.get((dev, *owner)) == key:
            del self._owners[(dev, *owner)]
        try:
            with self.cp.cuda.Device(dev):
                if last is not None:
                    last.synchronize()
                self.cp.cuda.runtime.ipcCloseMemHandle(base)
        except Exception:  # the peer may have exited; nothing left to release
            pass

    def mappings(self) -> int:
        """IPC mappings open now."""
        return len(self._opened)

    def close(self) -> None:
        for key in list(self._opened):
            self._release(key)
        self._exports.clear()
        peers = getattr(self, "_peer_signals", {})  # (a backend made without __init__ in tests has none)
        for (dev, _), ev in list(peers.items()):
            try:
                with self.cp.cuda.Device(dev):
                    self.cp.cuda.runtime.eventDestroy(ev)
            except Exception:  # the peer may have exited
                pass
        peers.clear()
