"""The caller's array, adapted once at entry: numpy, cupy or torch (CPU or CUDA).

:func:`adapt` turns whatever the caller passed into an :class:`Array`: a flat,
zero-copy numpy or cupy view (what the algorithms and kernels work on), its
kernel set, whether it lives on a device (which transport moves it), and the
caller's own object, which is what a collective returns (a torch tensor in,
a torch tensor out; ``out`` given, that very object).

torch is imported only when the object is a torch tensor (the type's module
name says so), so ``import collectives`` never imports torch.

:func:`check_overlap` is the one aliasing rule: every collective calls it
before a byte moves.
"""
from __future__ import annotations

import numpy as np

from .dtypes import KERNEL_DTYPES, ML_DTYPES, TABLE, as_int, dtype_code, info, numpy_to_torch, torch_dtypes
from .kernels import NUMPY_KERNELS, kernels_for

__all__ = ["Array", "adapt", "check_overlap"]

_HOST_DTYPES = frozenset(row.numpy for row in TABLE)


class Array:
    """One adapted buffer.

    Attributes:
      obj: the caller's object (numpy/cupy array or torch tensor); returned as the result.
      flat: a 1-D zero-copy numpy or cupy view of its memory.
      kernels: the kernel set that computes on ``flat``.
      device: True when ``flat`` is device memory (the device transport moves it).
      kind: the adapter of the caller's library; ``kind.empty(a, n)`` allocates a result
        of a's kind, dtype and device (n elements, or a's shape when n is None).
      stream: for torch CUDA tensors, the caller's stream ordering (else None).
    """

    __slots__ = ("obj", "flat", "kernels", "device", "kind", "stream")

    def __init__(self, obj, flat, kernels, device, kind, stream=None):
        self.obj = obj
        self.flat = flat
        self.kernels = kernels
        self.device = device
        self.kind = kind
        self.stream = stream

    @property
    def size(self) -> int:
        return self.flat.size

    @property
    def dtype(self) -> np.dtype:
        return self.flat.dtype

    @property
    def host(self):
        """The numpy array the direct roads work on: the caller's own (a stable identity
        keys their cached views), or the flat view of a CPU tensor."""
        return self.obj if type(self.obj) is np.ndarray else self.flat


def adapt(x, name: str = "x", writable: bool = False) -> Array:
    """Adapt ``x`` (numpy, cupy or torch) to an :class:`Array`, checking it once.

    Args:
      x: the caller's array or tensor; must be C-contiguous, of a supported dtype.
      name: the argument's name, for error messages.
      writable: refuse read-only host arrays (for ``out``).

    Raises:
      TypeError: not an array, or an unsupported dtype.
      ValueError: not contiguous, or read-only where ``writable``.
    """
    t = type(x)
    if t is np.ndarray:
        if x.dtype in _HOST_DTYPES and x.flags.c_contiguous and (not writable or x.flags.writeable):
            return Array(x, x if x.ndim == 1 else x.reshape(-1), NUMPY_KERNELS, False, NUMPY)  # the common case
        return NUMPY.adapt(x, name, writable)
    mod = t.__module__
    if mod.startswith("cupy"):
        return CUPY.adapt(x, name, writable)
    if mod == "torch" or mod.startswith("torch."):
        return TORCH.adapt(x, name, writable)
    if isinstance(x, np.ndarray):  # a numpy subclass
        return NUMPY.adapt(x, name, writable)
    raise TypeError(f"{name} must be a numpy or cupy array or a torch tensor, got {t.__name__}")


def _check(view, name, strides, device: bool = False):
    dtype_code(view.dtype)  # TypeError naming the supported dtypes
    if device:
        _device_dtype(view.dtype, name)
    if not view.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (got strides {strides}); pass a contiguous copy")


class _Numpy:
    name = "numpy array"

    def adapt(self, x, name, writable):
        _check(x, name, x.strides)
        if writable and not x.flags.writeable:
            raise ValueError(f"{name} is read-only")
        return Array(x, x.reshape(-1), NUMPY_KERNELS, False, self)

    def empty(self, like: Array, n):
        obj = np.empty_like(like.obj) if n is None else np.empty(n, dtype=like.flat.dtype)
        return Array(obj, obj if obj.ndim == 1 else obj.reshape(-1), NUMPY_KERNELS, False, self)


class _Cupy:
    name = "cupy array"

    def adapt(self, x, name, writable):
        _check(x, name, x.strides, device=True)
        return Array(x, x.reshape(-1), kernels_for(x), True, self)

    def empty(self, like: Array, n):
        xp = like.kernels.xp
        with _device_of(like.obj):
            obj = xp.empty_like(like.obj) if n is None else xp.empty(n, dtype=like.dtype)
        return Array(obj, obj.reshape(-1), like.kernels, True, self)


def _device_of(x):
    import cupy
    return cupy.cuda.Device(x.device.id)


class _Torch:
    """torch tensors: CPU through a numpy view, CUDA through DLPack to cupy."""

    name = "torch tensor"

    def adapt(self, t, name, writable):
        if type(t) is _TENSOR[0] and t.is_cpu and not t.requires_grad and t.is_contiguous():  # the common case
            dt = _TORCH_DTYPES.get(t.dtype)
            if dt is not None and dt not in ML_DTYPES:
                a = t.numpy()  # zero-copy; no detach() needed without autograd, no dtype detour
                return Array(t, a if a.ndim == 1 else a.reshape(-1), NUMPY_KERNELS, False, self)
        import torch
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (got strides {tuple(t.stride())}); pass .contiguous() "
                             f"(the torch process group does this for you)")
        dt = _torch_dtype(torch, t.dtype, name)
        d = t.detach()
        if t.device.type == "cpu":
            flat = (as_int(torch, d, dt).numpy().view(dt) if dt in ML_DTYPES else d.numpy()).reshape(-1)
            return Array(t, flat, NUMPY_KERNELS, False, self)
        if t.device.type != "cuda":
            raise TypeError(f"{name} is a torch tensor on {t.device}; only cpu and cuda tensors are supported")
        _device_dtype(dt, name)
        import cupy
        stream = _TorchStream(torch, cupy, t.device)
        with cupy.cuda.Device(stream.device), stream.external:  # the export is ordered on torch's stream
            flat = cupy.from_dlpack(as_int(torch, d, dt) if dt in ML_DTYPES else d)
        flat = flat.view(dt) if dt in ML_DTYPES else flat
        return Array(t, flat.reshape(-1), kernels_for(flat), True, self, stream)

    def empty(self, like: Array, n):
        t = like.obj
        obj = t.new_empty(t.shape if n is None else (n,))
        return self.adapt(obj, "out", False)


_TORCH_DTYPES: dict = {}
_TENSOR = [None]  # torch.Tensor, once a tensor has been adapted (torch stays unimported till then)


def tensor_in_heap(alloc, shape, dtype):
    """A CPU torch tensor of ``dtype`` over a heap array that ``alloc(shape, numpy dtype)``
    makes (zero-copy)."""
    import torch

    return numpy_to_torch(torch, alloc(shape, _torch_dtype(torch, dtype, "alloc")), dtype)


def _torch_dtype(torch, dtype, name) -> np.dtype:
    if not _TORCH_DTYPES:
        _TENSOR[0] = torch.Tensor
        _TORCH_DTYPES.update({t: row.numpy for t, row in torch_dtypes(torch).items()})
    dt = _TORCH_DTYPES.get(dtype)
    if dt is None:
        raise TypeError(f"{name}: unsupported torch dtype {dtype}; supported: "
                        f"{', '.join(str(t).removeprefix('torch.') for t in _TORCH_DTYPES)}")
    return dt


def _device_dtype(dt: np.dtype, name: str) -> None:
    """Device arrays only of the dtypes the CUDA kernels cover (TypeError otherwise)."""
    row = info(dt)
    if row.kernel is None:
        raise TypeError(f"{name}: a device array of dtype {row.name}: the CUDA kernels cover "
                        f"{', '.join(KERNEL_DTYPES)}; pass a host (numpy, CPU torch) array of {row.name}")


class _TorchStream:
    """Orders a collective on a torch CUDA tensor after the caller's work on torch's
    current stream, and the caller's later work after it.

    The kernels and the device transport run on the device's legacy default
    stream (see kernels/cuda_kernels.py); torch's current stream may be a
    non-blocking side stream, which the default stream does not wait for.
    So: :meth:`enter` (on the caller's thread, at the call) makes the default
    stream wait for an event recorded on torch's stream; :meth:`leave` (when
    the collective has run) makes torch's stream wait for the default stream.
    """

    def __init__(self, torch, cupy, device):
        self.cupy = cupy
        self.device = device.index if device.index is not None else torch.cuda.current_device()
        self.external = cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream,
                                                 device_id=self.device)

    def enter(self) -> None:
        with self.cupy.cuda.Device(self.device):
            self.cupy.cuda.Stream.null.wait_event(self.external.record())

    def leave(self) -> None:
        with self.cupy.cuda.Device(self.device):
            self.external.wait_event(self.cupy.cuda.Stream.null.record())


NUMPY, CUPY, TORCH = _Numpy(), _Cupy(), _Torch()


# ------------------------------------------------------- aliasing and overlap
def _span(a: Array) -> tuple[int, int]:
    """[first byte, past the last byte) of a contiguous buffer."""
    f = a.flat
    start = _address(f)
    return start, start + f.nbytes


def _address(f) -> int:
    return f.__array_interface__["data"][0] if isinstance(f, np.ndarray) else f.data.ptr  # numpy, cupy


def _overlap(a: Array, b: Array) -> bool:
    fa, fb = a.flat, b.flat
    if fa.nbytes == 0 or fb.nbytes == 0 or a.device != b.device:
        return False
    if isinstance(fa, np.ndarray) and isinstance(fb, np.ndarray):
        return np.may_share_memory(fa, fb)  # a bounds test, exact for contiguous buffers
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def check_overlap(collective: str, x: Array, out: Array, rank: int = 0, offset: int = 0) -> bool:
    """The one aliasing rule, checked before any byte moves; True when the call is in place.

    all_reduce, broadcast: ``out`` may be exactly ``x`` (in place) or apart from it.
    all_gather: ``x`` may be exactly its own segment of ``out`` (``offset``
    elements in: in place) or apart from it. reduce_scatter: ``out`` must not
    touch ``x``. Any other overlap is a ValueError naming the collective, the
    rank and both byte ranges.
    """
    if out.obj is x.obj and collective in ("all_reduce", "broadcast"):
        return True
    if not _overlap(x, out):
        return False
    if collective == "all_gather":
        own = out.flat[offset:offset + x.size]
        if own.size == x.size and _address(own) == _address(x.flat):
            return True
        allowed = f"x may only be exactly its own segment of out (elements {offset}..{offset + x.size})"
    elif collective == "reduce_scatter":
        allowed = "out must not overlap x"
    else:
        if x.flat.nbytes == out.flat.nbytes and _address(x.flat) == _address(out.flat):
            return True
        allowed = "out must be exactly x (in place) or not overlap it"
    (x0, x1), (o0, o1) = _span(x), _span(out)
    raise ValueError(f"rank {rank}: {collective}: x (bytes {x0:#x}..{x1:#x}) and out (bytes {o0:#x}..{o1:#x}) "
                     f"partially overlap; {allowed}")
