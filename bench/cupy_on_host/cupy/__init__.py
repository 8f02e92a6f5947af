"""A stand-in for cupy that runs on the CPU, for dry runs of the GPU scripts here.

    PYTHONPATH=bench/cupy_on_host:. python bench/gpu_defects.py

Arrays are numpy arrays of a subclass defined in this module (so
``collectives.kernels.is_device_array`` takes them for device arrays) with
cupy's ``.data.ptr``, ``.device`` and ``.get()``; "device" memory is host
memory, copies are memmoves, streams and events complete at once, and
NVRTC, modules and launches are bench/kernels_on_host.py's: the csrc/
kernels compiled by g++ and run thread by thread. So the GPU tests and
scripts (tests/test_cuda_kernels.py, bench/gpu_defects.py, bench/kernels.py,
tests/mpi/gpu_collectives.py in the staged and cuda_aware modes) run their
whole logic before the one run on a lent GPU. No IPC (ipc* raise), and no
RawModule at all (only real cupy's own compile flags are worth seeing: the
scripts say they skip it). Timings mean nothing here. ``HOST_STAND_IN`` says
so to bench/stand_in.py, the one place the scripts ask.
"""
from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from numpy import bool_, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/, for kernels_on_host
import kernels_on_host as _host  # noqa: E402

__version__ = "0-host-stand-in"
HOST_STAND_IN = True  # the marker bench/stand_in.py reads: the scripts' one sign that this is not a GPU
_DEVICE = SimpleNamespace(id=0)


class ndarray(np.ndarray):
    """A host array posing as a device array."""

    @property
    def data(self):
        return SimpleNamespace(ptr=self.ctypes.data)

    @property
    def device(self):
        return _DEVICE

    def get(self):
        return np.array(self)

    def set(self, arr):
        self[...] = arr


def _dev(a) -> ndarray:
    return a.view(ndarray)


def asarray(a, dtype=None):
    return _dev(np.array(a, dtype=dtype))


array = asarray


def asnumpy(a):
    return np.array(a)


def empty(shape, dtype=float64):
    return _dev(np.empty(shape, dtype))


def zeros(shape, dtype=float64):
    return _dev(np.zeros(shape, dtype))


def ones(shape, dtype=float64):
    return _dev(np.ones(shape, dtype))


def full(shape, value, dtype=None):
    return _dev(np.full(shape, value, dtype))


def empty_like(a, dtype=None):
    return _dev(np.empty_like(a, dtype))


def zeros_like(a, dtype=None):
    return _dev(np.zeros_like(a, dtype))


def arange(*args, **kw):
    return _dev(np.arange(*args, **kw))


dot = np.dot
sqrt = np.sqrt


class _Stream:
    _next = 1

    def __init__(self, non_blocking=False, null=False):
        self.ptr = 0 if null else _Stream._next
        _Stream._next += not null

    def synchronize(self):
        pass

    def wait_event(self, ev):
        pass

    def use(self):
        return self


class _Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    @property
    def done(self):
        return True


class _Device:
    compute_capability = "90"

    def __init__(self, dev=None):
        self.id = 0 if dev is None else int(dev)

    def use(self):
        return self

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _no_ipc(*a, **kw):
    raise RuntimeError("CUDA IPC: not in the host stand-in for cupy (use the staged or cuda_aware mode)")


_built = _host.HostCupy(sms=4, blocks_per_sm=8, log=[])
_driver = SimpleNamespace(
    occupancyMaxActiveBlocksPerMultiprocessor=lambda f, block, smem: 8,
    funcGetAttribute=lambda attr, f: 0 if attr == 3 else 32)  # 3: local bytes (none), else registers
_runtime = SimpleNamespace(
    getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 0, driverGetVersion=lambda: 0,
    getDeviceProperties=lambda dev: {"name": b"host stand-in (cupy_on_host)", "major": 9, "minor": 0,
                                     "multiProcessorCount": 4, "l2CacheSize": 0, "totalGlobalMem": 1 << 34},
    memcpyAsync=lambda dst, src, n, kind, stream: ctypes.memmove(dst, src, n),
    deviceSynchronize=lambda: None, ipcGetMemHandle=_no_ipc, ipcOpenMemHandle=_no_ipc,
    ipcCloseMemHandle=_no_ipc)
_Stream.null = _Stream(null=True)


def _elapsed(a, b):
    return (b.t - a.t) * 1e3


cuda = SimpleNamespace(
    Device=_Device, Stream=_Stream, Event=_Event, runtime=_runtime, driver=_driver, nvrtc=_built.cuda.nvrtc,
    function=_built.cuda.function, get_elapsed_time=_elapsed,
    alloc_pinned_memory=lambda n: bytearray(n))
