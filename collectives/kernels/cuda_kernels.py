"""Kernel set for cupy (CUDA) arrays: the csrc/ kernels behind NumpyKernels' interface.

Each .cu file is compiled once per device with NVRTC, called directly
through cupy's binding, to a cubin for the device's own architecture,
which is loaded as a module; its functions are looked up by the names in
:mod:`.launch`. Not through ``cupy.RawModule``: cupy appends
``-ftz=true`` to every compile, which flushes subnormals to zero and would
break the kernels' bit-for-bit agreement with the numpy reference. The
options are launch.nvrtc_options (IEEE division, square root, no flush).
The local ``#include "rz_common.cuh"`` is inlined before compiling.

Grids are sized from each kernel's occupancy as the driver reports it
(cuOccupancyMaxActiveBlocksPerMultiprocessor), one full wave at most.

Streams: every kernel and copy goes on the device's legacy default stream,
the one cupy uses unless told otherwise, so a collective is ordered after
the user's earlier work on that stream and before their later work, and
the device transport (transport/device/) can order its copies against
it with events.

Importing this module needs no cupy; :func:`cuda_kernels` raises a clear
RuntimeError when cupy or a GPU is missing.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..dtypes import accumulate_dtype
from . import launch
from .includes import inline_includes
from .which import is_device_array

_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction from unified addressing


def kernel_source(file: str) -> str:
    """The text NVRTC compiles: ``file`` with our local includes inlined (looked up beside it,
    then in csrc/)."""
    path = launch.source_path(file)
    return inline_includes(path, [path.parent, launch.CSRC])


def _file_of(name: str) -> str:
    """The file that defines entry point ``name`` (registered files too)."""
    for file, names in launch.kernel_names().items():
        if name in names:
            return file
    raise KeyError(f"no kernel file defines {name!r}")


def _flat(x, what):
    if not x.flags.c_contiguous:
        raise ValueError(f"{what} must be contiguous")
    return x.reshape(-1)


class CudaKernels:
    """The CUDA kernel set; half types computed in float32, like the numpy set.

    Args:
      cupy: the cupy module.
      device: the device :meth:`empty` allocates on (None: the caller's
        current device). Every other method runs on its arrays' device.
      unroll: vectors per thread in flight in reduce, cast and scale
        (RZ_UNROLL, see launch.nvrtc_options); None: the sources' default.
        bench/kernels.py --variants measures each.
    """

    name = "cuda"
    device = True

    def __init__(self, cupy, device: int | None = None, unroll: int | None = None):
        self.xp = cupy
        self._cp = cupy
        self._device = device
        self.unroll = unroll
        self._lock = threading.Lock()
        self._modules: dict = {}
        self._functions: dict = {}
        self._sm_counts: dict = {}
        self._occupancy: dict = {}
        self._used: set = set()
        self.compiled_with: dict = {}  # (device, file) -> the NVRTC options used

    # ------------------------------------------------------------ plumbing
    def _compile(self, dev: int, file: str):
        """Compile ``file`` for device ``dev`` with NVRTC (no -ftz) and load the result."""
        cp = self._cp
        nvrtc = cp.cuda.nvrtc
        cc = int(cp.cuda.Device(dev).compute_capability)  # "90" on an H100/H200
        try:
            archs = tuple(nvrtc.getSupportedArchs())
        except Exception:  # an old NVRTC without the query: trust it knows the device
            archs = (cc,)
        # A cubin for the device itself; PTX for the newest arch NVRTC knows
        # when the device is newer than NVRTC (the driver compiles that).
        arch = f"sm_{cc}" if cc in archs else f"compute_{max(a for a in archs if a <= cc)}"
        opts = launch.nvrtc_options(file, arch, self.unroll)
        prog = nvrtc.createProgram(kernel_source(file), file, (), ())
        try:
            try:
                nvrtc.compileProgram(prog, opts)
            except nvrtc.NVRTCError as e:
                raise RuntimeError(f"NVRTC {nvrtc.getVersion()} failed on {file} for device {dev} "
                                   f"({arch}, options {' '.join(opts)}): {e}\n{nvrtc.getProgramLog(prog)}") from e
            image = nvrtc.getCUBIN(prog) if arch.startswith("sm_") else nvrtc.getPTX(prog)
        finally:
            nvrtc.destroyProgram(prog)
        mod = cp.cuda.function.Module()
        mod.load(bytes(image))
        self.compiled_with[(dev, file)] = opts
        return mod

    def blocks_per_sm(self, dev: int, name: str) -> int:
        """Blocks of launch.BLOCK threads of kernel ``name`` one SM of ``dev`` holds at once."""
        key = (dev, name)
        n = self._occupancy.get(key)
        if n is None:
            f = self._function(dev, name)
            driver = self._cp.cuda.driver
            with self._cp.cuda.Device(dev):
                try:
                    n = int(driver.occupancyMaxActiveBlocksPerMultiprocessor(f.ptr, launch.BLOCK, 0))
                except Exception:  # the driver call missing: the calculator on its register count
                    regs = int(driver.funcGetAttribute(4, f.ptr))  # CU_FUNC_ATTRIBUTE_NUM_REGS
                    n = launch.occupancy(regs, launch.BLOCK)
            if n < 1:
                raise RuntimeError(f"{name}: no block of {launch.BLOCK} threads fits an SM of device {dev}")
            n = self._occupancy[key] = n
        return n

    def _function(self, dev: int, name: str):
        key = (dev, name)
        f = self._functions.get(key)
        if f is None:
            with self._lock:
                file = _file_of(name)
                mod = self._modules.get((dev, file))
                if mod is None:
                    with self._cp.cuda.Device(dev):
                        mod = self._modules[(dev, file)] = self._compile(dev, file)
                f = self._functions[key] = mod.get_function(name)
        return f

    def _sm_count(self, dev: int) -> int:
        n = self._sm_counts.get(dev)
        if n is None:
            n = self._sm_counts[dev] = int(
                self._cp.cuda.runtime.getDeviceProperties(dev)["multiProcessorCount"])
        return n

    def _launch(self, name: str, n: int, planned, args, tail=(), readonly=()) -> None:
        """Launch ``name`` over n elements; ``planned`` are the arrays whose alignment counts,
        ``readonly`` the indices among them of inputs the kernel may load element by element."""
        if n == 0:
            return
        dev = planned[0].device.id
        for a in planned:
            if a.device.id != dev:
                raise ValueError(f"{name}: arrays on devices {a.device.id} and {dev}")
        cp = self._cp
        with cp.cuda.Device(dev):
            plan = launch.plan(name, n, [(a.data.ptr, a.dtype.itemsize) for a in planned], self._sm_count(dev),
                               blocks_per_sm=self.blocks_per_sm(dev, name), readonly=readonly)
            sp = plan.split
            self._function(dev, name)((plan.grid,), (plan.block,),
                                      (*args, np.int64(n), np.int64(sp.head), np.int64(sp.nvec),
                                       np.int32(sp.loose), *tail),
                                      stream=cp.cuda.Stream.null)
        self._used.add(dev)

    def launch_kernel(self, name: str, n: int, arrays, args, tail=(), readonly=()) -> None:
        """Launch csrc/ entry point ``name`` over n elements, compiled and loaded like this
        set's own kernels: for kernel users outside collectives (sharding/optim_cuda.py).

        Args:
          name: an entry point of launch.kernel_names().
          n: elements per buffer (0 launches nothing).
          arrays: the flat device arrays whose alignment decides the vector split, on one device.
          args: the kernel's leading arguments; n and the split follow them, then ``tail``.
          tail: the kernel's trailing scalar arguments.
          readonly: indices into ``arrays`` of inputs the kernel only reads.
        """
        self._launch(name, n, arrays, args, tail, readonly)

    @staticmethod
    def _same(what: str, first, *others) -> None:
        for o in others:
            if o.dtype != first.dtype or o.size != first.size:
                raise ValueError(f"{what}: arrays differ ({first.dtype}[{first.size}] vs {o.dtype}[{o.size}])")

    # ----------------------------------------------------------- interface
    def empty(self, n: int, dtype):
        if self._device is None:
            return self._cp.empty(n, dtype=dtype)
        with self._cp.cuda.Device(self._device):
            return self._cp.empty(n, dtype=dtype)

    def copy(self, dst, src) -> None:
        """dst[...] = src, raw bytes on the default stream (either may be host memory)."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"copy: {dst.nbytes} bytes into {src.nbytes}")
        if dst.nbytes == 0:
            return
        # numpy 2 arrays have a .device attribute too ("cpu"): ask what the array is.
        on_dst, on_src = is_device_array(dst), is_device_array(src)
        if not (on_dst or on_src):
            raise ValueError("copy: both arrays are host memory; one must be on a device")

        def ptr(x, on_device):
            return x.data.ptr if on_device else x.ctypes.data
        dev = dst.device.id if on_dst else src.device.id
        cp = self._cp
        with cp.cuda.Device(dev):
            cp.cuda.runtime.memcpyAsync(ptr(dst, on_dst), ptr(src, on_src), dst.nbytes, _MEMCPY_DEFAULT,
                                        cp.cuda.Stream.null.ptr)
        self._used.add(dev)

    def reduce(self, op: str, a, b, out) -> None:
        """out = op(a, b), elementwise. ``out`` may alias ``a`` or ``b``."""
        self._same("reduce", a, b, out)
        a, b, out = _flat(a, "a"), _flat(b, "b"), _flat(out, "out")
        self._launch(launch.reduce_kernel(op, a.dtype), a.size, [a, b, out], (a, b, out), readonly=(0, 1))

    def reduce_(self, op: str, dst, src) -> None:
        """dst = op(dst, src), in place."""
        self.reduce(op, dst, src, dst)

    def scale(self, x, divisor: int) -> None:
        """x /= divisor in place (the second half of avg). Integers truncate toward zero."""
        if int(divisor) < 1:
            raise ValueError(f"scale: divisor must be >= 1, got {divisor}")
        x = _flat(x, "x")
        d = accumulate_dtype(x.dtype).type(divisor)  # float32 for the half types
        self._launch(launch.scale_kernel(x.dtype), x.size, [x], (x,), (d,))

    def synchronize(self) -> None:
        """Wait for every kernel and copy this set launched."""
        for dev in sorted(self._used):
            with self._cp.cuda.Device(dev):
                self._cp.cuda.Stream.null.synchronize()


@functools.lru_cache(maxsize=None)
def _kernels_for_device(device: int | None) -> CudaKernels:
    import cupy
    return CudaKernels(cupy, device)


def cuda_kernels(device: int | None = None) -> CudaKernels:
    """The CUDA kernel set (one per device); RuntimeError without cupy or a GPU.

    Args:
      device: where :meth:`CudaKernels.empty` allocates; None for the
        caller's current device.
    """
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError(f"the CUDA kernels need cupy: pip install 'ringzero[gpu]' ({e})") from e
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # cupy importable, but no driver or no device
        raise RuntimeError(f"cupy is installed but no CUDA device is usable: {e}") from e
    if count < 1:
        raise RuntimeError("cupy is installed but no CUDA device is present")
    return _kernels_for_device(device)
