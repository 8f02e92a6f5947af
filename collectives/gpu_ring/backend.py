"""What the ring needs of a device, and that interface over cupy (compiled with NVRTC).

A backend allocates device memory and pinned host-mapped memory, compiles and
launches the kernels of csrc/ring/, makes streams, and exports and opens CUDA IPC
handles. Two implement it: :class:`CupyBackend` here (a GPU), and the host build in
collectives/gpu_ring/host.py (every GPU thread an OS thread, for tests and dry runs). The
ring (ring.py) only talks to this interface.

Launches pass the one struct argument through cuLaunchKernel's kernelParams (cupy's
driver binding), cooperatively (cuLaunchCooperativeKernel) when asked: nothing of it
has run on a GPU yet.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Protocol

from . import source

_HOST_ALLOC_PORTABLE_MAPPED = 1 | 2  # cudaHostAllocPortable | cudaHostAllocMapped
_ATTR_COOPERATIVE_LAUNCH = 95  # cudaDevAttrCooperativeLaunch
_STREAM_NON_BLOCKING = 1


class Backend(Protocol):
    """The device operations the ring uses (see module docstring)."""

    name: str
    sm_count: int
    block: int  # threads per block
    cooperative: bool

    def device_alloc(self, nbytes: int) -> Any: ...          # .ptr
    def mapped_alloc(self, nbytes: int) -> Any: ...          # .ptr (device), .host (host address)
    def memset(self, ptr: int, value: int, nbytes: int) -> None: ...
    def function(self, name: str) -> Any: ...
    def blocks_per_sm(self, fn: Any, block: int) -> int: ...
    def launch(self, fn: Any, grid: int, block: int, args: ctypes.Structure, stream: Any,
               cooperative: bool = False) -> None: ...
    def stream(self) -> Any: ...
    def synchronize(self, stream: Any) -> None: ...
    def ipc_handle(self, ptr: int) -> bytes: ...
    def ipc_open(self, handle: bytes) -> int: ...


class _Raw:
    def __init__(self, ptr: int, nbytes: int, free, host: int | None = None):
        self.ptr, self.nbytes, self.host, self._free = ptr, nbytes, ptr if host is None else host, free

    def __del__(self):
        try:
            self._free(self.ptr)
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass


class CupyBackend:
    """The ring's kernels on a GPU through cupy (NVRTC for compiling, the driver for launching).

    Args:
      cupy: the cupy module.
      device: the device ordinal.
    """

    name = "cuda"
    block = source.BLOCK

    def __init__(self, cupy, device: int = 0):
        self._cp, self.device = cupy, device
        rt = cupy.cuda.runtime
        with cupy.cuda.Device(device):
            self.sm_count = int(rt.getDeviceProperties(device)["multiProcessorCount"])
            try:
                self.cooperative = bool(rt.deviceGetAttribute(_ATTR_COOPERATIVE_LAUNCH, device))
            except Exception:
                self.cooperative = False
        self._modules: dict = {}
        self._lock = threading.Lock()
        self.compiled_with: dict = {}

    def device_alloc(self, nbytes: int) -> _Raw:
        rt = self._cp.cuda.runtime
        with self._cp.cuda.Device(self.device):
            return _Raw(rt.malloc(nbytes), nbytes, rt.free)  # cudaMalloc itself: IPC needs a base allocation

    def mapped_alloc(self, nbytes: int) -> _Raw:
        rt = self._cp.cuda.runtime
        ptr = rt.hostAlloc(nbytes, _HOST_ALLOC_PORTABLE_MAPPED)  # with unified addressing: one address for both
        ctypes.memset(ptr, 0, nbytes)
        return _Raw(ptr, nbytes, rt.freeHost)

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        with self._cp.cuda.Device(self.device):
            self._cp.cuda.runtime.memset(ptr, value, nbytes)

    def _module(self, file: str):
        mod = self._modules.get(file)
        if mod is None:
            with self._lock:
                mod = self._modules.get(file) or self._compile(file)
                self._modules[file] = mod
        return mod

    def _compile(self, file: str):
        cp = self._cp
        nvrtc = cp.cuda.nvrtc
        cc = int(cp.cuda.Device(self.device).compute_capability)
        opts = (*source.OPTIONS, f"--gpu-architecture=sm_{cc}")
        prog = nvrtc.createProgram(source.kernel_source(file), file, (), ())
        try:
            try:
                nvrtc.compileProgram(prog, opts)
            except nvrtc.NVRTCError as e:
                raise RuntimeError(f"NVRTC failed on csrc/ring/{file} ({' '.join(opts)}): {e}\n"
                                   f"{nvrtc.getProgramLog(prog)}") from e
            image = nvrtc.getCUBIN(prog)
        finally:
            nvrtc.destroyProgram(prog)
        mod = cp.cuda.function.Module()
        with cp.cuda.Device(self.device):
            mod.load(bytes(image))
        self.compiled_with[file] = opts
        return mod

    def function(self, name: str):
        return self._module(source.file_of(name)).get_function(name)

    def blocks_per_sm(self, fn, block: int) -> int:
        with self._cp.cuda.Device(self.device):
            return int(self._cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, block, 0))

    def launch(self, fn, grid: int, block: int, args: ctypes.Structure, stream, cooperative: bool = False) -> None:
        params = (ctypes.c_void_p * 1)(ctypes.addressof(args))  # one parameter: the struct, copied at launch
        drv = self._cp.cuda.driver
        sptr = stream.ptr if stream is not None else 0
        with self._cp.cuda.Device(self.device):
            if cooperative:
                drv.launchCooperativeKernel(fn.ptr, grid, 1, 1, block, 1, 1, 0, sptr, ctypes.addressof(params))
            else:
                drv.launchKernel(fn.ptr, grid, 1, 1, block, 1, 1, 0, sptr, ctypes.addressof(params), 0)

    def stream(self):
        with self._cp.cuda.Device(self.device):
            return self._cp.cuda.Stream(non_blocking=True)

    def synchronize(self, stream) -> None:
        with self._cp.cuda.Device(self.device):
            (stream if stream is not None else self._cp.cuda.Stream.null).synchronize()

    def ipc_handle(self, ptr: int) -> bytes:
        return bytes(self._cp.cuda.runtime.ipcGetMemHandle(ptr))

    def ipc_open(self, handle: bytes) -> int:
        with self._cp.cuda.Device(self.device):
            return int(self._cp.cuda.runtime.ipcOpenMemHandle(handle))
