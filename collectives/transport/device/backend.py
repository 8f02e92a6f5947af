"""The GPU calls the device transport's protocols need, through cupy (tests pass a fake)."""
from __future__ import annotations

import ctypes

import numpy as np

from ...errors import CollectiveError


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
        self._opened: dict = {}  # (device, handle) -> mapped base pointer
        self._libcuda = None

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

    def _base(self, ptr: int) -> int:
        """Start of the cudaMalloc allocation holding ptr (IPC handles name allocations)."""
        if self._libcuda is None:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuMemGetAddressRange_v2
            fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
            fn.restype = ctypes.c_int
            self._libcuda = fn
        base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
        rc = self._libcuda(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
        if rc != 0:
            raise CollectiveError(f"cuMemGetAddressRange failed (CUresult {rc}) for pointer {ptr:#x}")
        return base.value

    def export(self, buf) -> tuple[bytes, int]:
        """(IPC handle of buf's allocation, buf's byte offset in it)."""
        with self.cp.cuda.Device(buf.device.id):
            ptr = buf.data.ptr
            base = self._base(ptr)
            return bytes(self.cp.cuda.runtime.ipcGetMemHandle(base)), ptr - base

    def pull(self, dst, handle: bytes, offset: int, nbytes: int) -> _CudaEvent:
        """Copy nbytes from a peer's allocation into dst, on dst's default stream."""
        cp = self.cp
        dev = dst.device.id
        with cp.cuda.Device(dev):
            base = self._opened.get((dev, handle))
            if base is None:
                base = self._opened[(dev, handle)] = cp.cuda.runtime.ipcOpenMemHandle(handle, 1)
            if nbytes:
                cp.cuda.runtime.memcpyAsync(dst.data.ptr, base + offset, nbytes, 4, cp.cuda.Stream.null.ptr)
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(cp.cuda.Stream.null)
        return _CudaEvent(ev)

    def close(self) -> None:
        for (dev, _), base in self._opened.items():
            try:
                with self.cp.cuda.Device(dev):
                    self.cp.cuda.runtime.ipcCloseMemHandle(base)
            except Exception:  # the peer may have exited; nothing left to release
                pass
        self._opened.clear()


