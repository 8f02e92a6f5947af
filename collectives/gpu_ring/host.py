"""The ring kernels' host build: csrc/ring/*.cu compiled by g++ with csrc/ring/host_shim.h.

    from collectives.gpu_ring.host import HostBackend
    backend = HostBackend(block=8)           # the collectives.gpu_ring Backend, on CPU threads
    ring = Ring.virtual(backend, world=4, geometry=Geometry(2, 2, 64, 4096))

Every GPU thread of every block of every rank is an OS thread (host_shim.h), so
kernels that wait for each other run as they would on a device, and the device's
memory is host memory (numpy buffers, 256-byte aligned like cudaMalloc). A launch
starts when the one before it on its stream has finished (a stream's order), launches
on other streams run beside it. Builds are
cached by the hash of their text and flags (RZ_HOST_CACHE, default a temp folder);
``defines`` builds a variant (-DRZ_BROKEN_NO_FREE_WAIT, ...), ``tsan`` one under
ThreadSanitizer (load it in a process started with LD_PRELOAD=libtsan.so, see
:func:`tsan_preload`). The two files compile in parallel (about 7 s each, once).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..tuning import load  # (the host build's cache folder)
from . import layout, source

SHIM_NAME = "host_shim.h"  # beside the kernels: csrc/ring/, or gpu_ring/kernels/ once installed
_T = load()
SHIM = source.source_dirs()[0] / SHIM_NAME
CXX = _T.host_cxx
FLAGS = ["-std=c++17", "-fPIC", "-shared", "-pthread", "-ffp-contract=off", "-fno-fast-math",
         "-fno-strict-aliasing", "-w"]
OPT = ["-O2"]
TSAN = ["-O1", "-g", "-fsanitize=thread"]
CACHE = Path(_T.host_cache or Path(tempfile.gettempdir()) / "rz-ring-on-host")


def _trailer(names: list[str]) -> str:
    """Per entry point a function handing its launcher to Python, and the structs' layout."""
    out = ["\n// ---- host launchers and layout (collectives/gpu_ring/host.py)"]
    for n in names:
        out.append(f'extern "C" rz_entry_fn rzhost_fn_{n}() {{ return [](const void* p) {{ rz_invoke({n}, p); }}; }}')
        out.append(f'extern "C" long long rzhost_argsize_{n}() {{ return rz_arg_size({n}); }}')
    fields = []
    for cname, py in layout.STRUCTS.items():
        fields.append(f"(long long)sizeof({cname})")
        fields += [f"(long long)offsetof({cname}, {f})" for f, _ in py._fields_ if not f.startswith("pad")]
    out.append('extern "C" int rzhost_layout(long long* out) { long long v[] = {' + ", ".join(fields) + "};"
               " for (unsigned i = 0; i < sizeof(v) / sizeof(v[0]); ++i) out[i] = v[i]; return (int)(sizeof(v) / sizeof(v[0])); }")
    return "\n".join(out) + "\n"


def layout_expected() -> list[int]:
    """What rzhost_layout should return, from the ctypes mirrors in collectives/gpu_ring/layout.py."""
    out = []
    for py in layout.STRUCTS.values():
        out.append(ctypes.sizeof(py))
        out += [getattr(py, f).offset for f, _ in py._fields_ if not f.startswith("pad")]
    return out


FEW = ("bf16", "f32", "rz_ring_ag", "rz_oneshot_ag", "rz_probe")  # what -DRZ_FEW_DTYPES keeps


def names(file: str, few: bool) -> list[str]:
    """The entry points a build of ``file`` has (all, or the few of -DRZ_FEW_DTYPES)."""
    every = source.kernel_names()[file]
    return [n for n in every if n in FEW or n.rsplit("_", 1)[-1] in FEW] if few else every


def _job(file: str, defines, tsan: bool, dirs):
    few = "-DRZ_FEW_DTYPES" in defines
    text = source.kernel_source(file, dirs) + _trailer(names(file, few))
    flags = [*FLAGS, *(TSAN if tsan else OPT), *defines]
    key = hashlib.sha256("\0".join([text, SHIM.read_text(), CXX, *flags]).encode()).hexdigest()[:16]
    lib = CACHE / f"{Path(file).stem}{'-tsan' if tsan else ''}-{key}.so"
    if lib.exists():
        return lib, None
    CACHE.mkdir(parents=True, exist_ok=True)
    cpp = lib.with_suffix(".cpp")
    cpp.write_text(text)
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # g++ itself never under TSan
    proc = subprocess.Popen([CXX, "-include", str(SHIM), *flags, "-x", "c++", str(cpp), "-o", str(tmp)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return lib, (proc, tmp)


def build(defines=(), tsan: bool = False, dirs=None, files=source.FILES) -> dict[str, Path]:
    """The kernel files built (cached), in parallel: {file: shared library}.

    Args:
      defines: -D options (RZ_FEW_DTYPES: bf16 and f32 only; RZ_BROKEN_*: a broken protocol).
      tsan: under ThreadSanitizer.
      dirs: kernel sources to use instead of csrc/ring (see collectives.gpu_ring.source).
      files: which of ring.cu and ring_small.cu.
    """
    jobs = {f: _job(f, tuple(defines), tsan, dirs) for f in files}
    for file, (lib, pending) in jobs.items():
        if pending is not None:
            proc, tmp = pending
            _, err = proc.communicate(timeout=600)
            if proc.returncode:
                raise RuntimeError(f"g++ failed on csrc/ring/{file} {' '.join(defines)}:\n{err[-4000:]}")
            os.replace(tmp, lib)
    return {f: lib for f, (lib, _) in jobs.items()}


def tsan_preload() -> str:
    """The ThreadSanitizer runtime a Python process must be started with to load a tsan build."""
    return subprocess.run([CXX, "-print-file-name=libtsan.so"], capture_output=True, text=True).stdout.strip()


class HostBuffer:
    """Host memory posing as device memory: ``ptr`` 256-byte aligned; ``host`` the same address."""

    def __init__(self, nbytes: int):
        self._raw = np.zeros(nbytes + 256, np.uint8)
        start = (-self._raw.ctypes.data) % 256
        self.view = self._raw[start:start + nbytes]
        self.ptr = self.host = self.view.ctypes.data
        self.nbytes = nbytes


class HostFunction:
    def __init__(self, lib, name: str):
        self.name, self.lib = name, lib  # launched by its own library: the thread indices are per library
        lib.rzhost_start.restype = ctypes.c_void_p
        lib.rzhost_start.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_longlong]
        lib.rzhost_join.argtypes = [ctypes.c_void_p]
        get = getattr(lib, f"rzhost_fn_{name}")
        get.restype = ctypes.c_void_p
        self.entry = get()
        size = getattr(lib, f"rzhost_argsize_{name}")
        size.restype = ctypes.c_longlong
        self.argsize = int(size())


class HostStream:
    """The launch in flight on this 'stream' (at most one: the next waits for it), joined by synchronize."""

    def __init__(self):
        self.pending: list = []


class HostBackend:
    """collectives.gpu_ring's Backend on CPU threads (see the module docstring).

    Args:
      block: threads per block (a GPU runs 512; a few are enough to exercise the protocol).
      sm_count: what the co-residency rules take as the device's SMs.
      cooperative: whether a cooperative launch is 'supported' (the host runs every block at once anyway).
      defines, tsan, dirs, files: the build (see :func:`build`).
    """

    name = "host"

    def __init__(self, block: int = 8, sm_count: int = 132, cooperative: bool = True, defines=(),
                 tsan: bool = False, dirs=None, files=source.FILES):
        self.block, self.sm_count, self.cooperative = block, sm_count, cooperative
        self.libs = {f: ctypes.CDLL(str(p)) for f, p in build(defines, tsan, dirs, files).items()}
        for lb in self.libs.values():
            lb.rzhost_trace_get.argtypes = [ctypes.c_longlong, ctypes.POINTER(ctypes.c_longlong)]
            lb.rzhost_trace_count.restype = ctypes.c_longlong
        self._functions: dict = {}
        self.launches: list = []  # (name, grid, block, cooperative), for tests

    def device_alloc(self, nbytes: int) -> HostBuffer:
        return HostBuffer(nbytes)

    def mapped_alloc(self, nbytes: int) -> HostBuffer:
        return HostBuffer(nbytes)

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        ctypes.memset(ptr, value, nbytes)

    def function(self, name: str) -> HostFunction:
        f = self._functions.get(name)
        if f is None:
            lib = self.libs.get(source.file_of(name))
            if lib is None or not hasattr(lib, f"rzhost_fn_{name}"):
                raise RuntimeError(f"{name} is not in this host build ({', '.join(self.libs)})")
            f = self._functions[name] = HostFunction(lib, name)
        return f

    def blocks_per_sm(self, fn, block: int) -> int:
        return 1

    def launch(self, fn: HostFunction, grid: int, block: int, args: ctypes.Structure, stream,
               cooperative: bool = False) -> None:
        if ctypes.sizeof(args) != fn.argsize:
            raise RuntimeError(f"{fn.name}: argument of {ctypes.sizeof(args)} bytes, the kernel takes {fn.argsize}")
        self.synchronize(stream)  # a stream runs its launches one after another, as a GPU's does
        run = fn.lib.rzhost_start(fn.entry, grid, block, ctypes.addressof(args), ctypes.sizeof(args))
        self.launches.append((fn.name, grid, block, cooperative))
        stream.pending.append((fn.lib, run))

    def stream(self) -> HostStream:
        return HostStream()

    def synchronize(self, stream: HostStream) -> None:
        while stream.pending:
            lib, run = stream.pending.pop(0)
            lib.rzhost_join(run)

    # IPC inside one process: a handle is the address (ranks as threads stand for processes)
    def ipc_handle(self, ptr: int) -> bytes:
        return int(ptr).to_bytes(8, "little")

    def ipc_open(self, handle: bytes) -> int:
        return int.from_bytes(handle, "little")

    # the move log of host_shim.h (explain.py)
    def trace(self, on: bool) -> None:
        for lb in self.libs.values():
            lb.rzhost_trace(int(on))

    def trace_events(self) -> list[tuple]:
        out = []
        for lb in self.libs.values():
            buf = (ctypes.c_longlong * 11)()
            for i in range(lb.rzhost_trace_count()):
                lb.rzhost_trace_get(i, buf)
                out.append(tuple(buf))
        return out

    def layout(self) -> list[int]:
        out = (ctypes.c_longlong * 512)()
        n = next(iter(self.libs.values())).rzhost_layout(out)
        return list(out[:n])
