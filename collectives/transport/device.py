"""Moving device (cupy) buffers between ranks, behind the host transport's interface.

Three ways, one chosen per communicator (the same on every rank):

- ``cuda_aware``: the MPI library reads and writes device memory itself.
  Used only when the library says so (``MPIX_Query_cuda_support``, asked at
  run time, never assumed).
- ``ipc``: ranks on one node (several may share one GPU). The receiver
  copies straight from the sender's buffer, device to device: the sender
  posts a small control message (the CUDA IPC handle of its buffer's
  allocation, the offset, the length) and keeps the buffer until the
  receiver acknowledges. Each receiver opens an allocation's handle once
  and keeps the mapping (cupy's pool reuses its allocations), so after the
  first few messages only 96-byte control messages cross MPI.
- ``staged``: copies through pinned host buffers on a copy stream. Every
  chunk's device-to-host copy is queued at isend time and its MPI send
  posted as soon as that copy lands, so the copy of chunk k+1 runs while
  chunk k is on the wire (the ring posts many chunks at once); receives
  land in pinned memory and go up on the same stream.

Ordering with the kernels. Kernels run on the device's default stream
(kernels/cuda_kernels.py). A send records an event there first, so it sees
the reduce that produced its data; a receive records one too, so it never
overwrites a buffer a queued kernel still reads. A receive completes once
its data is on the device, so a kernel launched afterwards reads it.

A message may be shorter than its receive buffer, as in MPI. IPC copies
only the bytes sent; staging and CUDA-aware MPI may also write the bytes past
a short message (every receive of device data in the ring is exact).

Messages between one pair of ranks with one tag stay in post order, as the
algorithms expect: each (direction, peer, tag) is a FIFO channel, and an
operation puts its MPI message on the wire only after the ones before it.

The GPU calls sit behind a small backend (:class:`CupyBackend`) so the
protocols themselves run in CPU tests over the in-process transport, with
a fake backend (tests/test_cuda_transport.py).
"""
from __future__ import annotations

import ctypes
from collections import defaultdict, deque

import numpy as np

from ..errors import CollectiveError

MODES = ("cuda_aware", "ipc", "staged")
ACK_TAG_OFFSET = 16384  # acks travel on tag + this (MPI guarantees tags up to 32767)
_CTRL_WORDS = 4 + 8  # nbytes, offset, 2 spare, 64-byte IPC handle


# --------------------------------------------------------------- detection
def cuda_aware_mpi() -> tuple[bool, str]:
    """Does the loaded MPI library accept device pointers? (answer, reason)

    Asks Open MPI's MPIX_Query_cuda_support or MPICH's
    MPIX_GPU_query_support in the libmpi this process loaded.
    """
    try:
        from mpi4py import MPI  # noqa: F401  (loads libmpi)
    except ImportError as e:
        return False, f"no mpi4py: {e}"
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "libmpi" in line and ".so" in line})
    except OSError as e:
        return False, f"cannot list loaded libraries: {e}"
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "MPIX_Query_cuda_support"):
            ok = bool(lib.MPIX_Query_cuda_support())
            return ok, f"MPIX_Query_cuda_support() = {int(ok)} in {path}"
        if hasattr(lib, "MPIX_GPU_query_support"):
            flag = ctypes.c_int(0)
            if lib.MPIX_GPU_query_support(ctypes.c_int(0), ctypes.byref(flag)) == 0:  # 0: MPIX_GPU_SUPPORT_CUDA
                return bool(flag.value), f"MPIX_GPU_query_support(CUDA) = {flag.value} in {path}"
    return False, "the MPI library has no CUDA support query; assuming host-only"


def choose_mode(host_transport, requested: str = "auto") -> str:
    """The mode every rank will use: ``requested``, or for "auto" IPC when all
    ranks share a node, else CUDA-aware MPI when the library has it, else staging."""
    if requested != "auto":
        if requested not in MODES:
            raise ValueError(f"unknown device transport mode {requested!r}; choose from auto, {', '.join(MODES)}")
        return requested
    comm = getattr(host_transport, "comm", None)
    if comm is None:
        raise ValueError("mode='auto' needs an MPI transport (with .comm); pass the mode explicitly")
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    one_node = node.Get_size() == comm.Get_size()  # the same answer on every rank
    node.Free()
    aware = comm.allreduce(int(cuda_aware_mpi()[0]), op=MPI.MIN)  # all ranks, or none
    if one_node:
        return "ipc"
    return "cuda_aware" if aware else "staged"


# ----------------------------------------------------------------- backend
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


# -------------------------------------------------------------- operations
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
            self.reqs.append(self.t.host.isend(self.host, self.peer, self.tag))
            self.ordered = True
        if self.ordered and self.t.host.test(self.reqs[0]):
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
                self.landed = self.t.backend.h2d(self.buf, self.host, self.free)
        elif self.landed.done():
            self.host, self.done = None, True


class _DirectSend(_Op):
    """CUDA-aware MPI: the library reads the device buffer once its data is final."""

    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        self.ready = t.backend.record(buf)

    def step(self):
        if not self.ordered and self.ready.done():
            self.reqs.append(self.t.host.isend(self.buf, self.peer, self.tag))
            self.ordered = True
        if self.ordered and self.t.host.test(self.reqs[0]):
            self.done = True


class _DirectRecv(_Op):
    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        self.free = t.backend.record(buf)

    def step(self):
        if not self.ordered and self.free.done():
            self.reqs.append(self.t.host.irecv(self.buf, self.peer, self.tag))
            self.ordered = True
        if self.ordered and self.t.host.test(self.reqs[0]):
            self.done = True


def _ctrl(nbytes: int, offset: int, handle: bytes) -> np.ndarray:
    msg = np.zeros(_CTRL_WORDS, np.int64)
    msg[0], msg[1] = nbytes, offset
    raw = np.frombuffer(handle.ljust(64, b"\0")[:64], np.int64)
    msg[4:] = raw
    return msg


class _IpcSend(_Op):
    def __init__(self, t, buf, peer, tag):
        super().__init__(t, buf, peer, tag)
        self.ready = t.backend.record(buf)

    def step(self):
        t = self.t
        if not self.ordered and self.ready.done():
            handle, offset = t.backend.export(self.buf) if self.nbytes else (b"", 0)
            self.msg = _ctrl(self.nbytes, offset, handle)
            self.ack = np.zeros(1, np.int64)
            self.reqs += [t.host.isend(self.msg, self.peer, self.tag),
                          t.host.irecv(self.ack, self.peer, self.tag + ACK_TAG_OFFSET)]
            self.ordered = True
        if self.ordered and t.host.testall(self.reqs):
            self.done = True  # the receiver has copied; buf is ours again


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
            nbytes, offset = int(self.msg[0]), int(self.msg[1])
            if nbytes > self.nbytes:  # shorter is fine, as in MPI
                raise CollectiveError(f"rank {t.rank}: message from rank {self.peer} (tag {self.tag}) has "
                                      f"{nbytes} bytes, the receive has room for {self.nbytes}")
            handle = self.msg[4:].tobytes()
            self.copied = t.backend.pull(self.buf, handle, offset, nbytes) if nbytes else _Ready()
        if self.acked is None and self.copied.done():
            self.ack = np.ones(1, np.int64)
            self.acked = t.host.isend(self.ack, self.peer, self.tag + ACK_TAG_OFFSET)
            self.reqs.append(self.acked)
        if self.acked is not None and t.host.test(self.acked):
            self.done = True


class _Ready:
    @staticmethod
    def done() -> bool:
        return True


_OPS = {"staged": (_StagedSend, _StagedRecv), "cuda_aware": (_DirectSend, _DirectRecv),
        "ipc": (_IpcSend, _IpcRecv)}


# --------------------------------------------------------------- transport
class DeviceTransport:
    """The transport interface for device buffers; host buffers pass straight to ``host``.

    Args:
      host: the host transport (MpiTransport, or InProcTransport in tests).
      mode: "cuda_aware", "ipc" or "staged" (see choose_mode for "auto").
      backend: the GPU calls (CupyBackend by default).
    """

    def __init__(self, host, mode: str, backend=None):
        if mode not in MODES:
            raise ValueError(f"unknown device transport mode {mode!r}; choose from {', '.join(MODES)}")
        self.host, self.mode = host, mode
        self.backend = backend if backend is not None else CupyBackend()
        self.rank, self.size = host.rank, host.size
        self.fault = None
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


def make_device_transport(host_transport, mode: str = "auto", *, backend=None) -> DeviceTransport:
    """The device transport over ``host_transport`` (returned as is if it already is one).

    Args:
      host_transport: an MpiTransport (or any transport, with an explicit mode).
      mode: "auto" (see choose_mode), "cuda_aware", "ipc" or "staged".
      backend: the GPU calls; CupyBackend unless a test passes a fake.
    """
    if isinstance(host_transport, DeviceTransport):
        return host_transport
    if backend is None:
        backend = CupyBackend()
    return DeviceTransport(host_transport, choose_mode(host_transport, mode), backend)
