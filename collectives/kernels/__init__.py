"""One registry for kernel sets: numpy for host arrays, CUDA for device arrays.

Host: numpy arrays and CPU torch tensors. Device: cupy arrays and CUDA torch
tensors. Neither cupy nor torch is imported to answer (the type's module
name says which library an object comes from).
"""
from __future__ import annotations

from .numpy_kernels import NUMPY_KERNELS, NumpyKernels
from .which import is_device_array, library

__all__ = ["NUMPY_KERNELS", "NumpyKernels", "is_device_array", "kernels_for"]


def kernels_for(x):
    """The kernel set that reduces arrays like ``x`` (on x's GPU for device arrays)."""
    lib = library(x)
    if lib == "numpy" or lib == "torch":
        return NUMPY_KERNELS
    try:
        from .cuda_kernels import cuda_kernels
    except ImportError as e:  # cupy present but our CUDA set could not load
        raise RuntimeError(f"a device array was given but the CUDA kernel set is unavailable: {e}") from e
    device = x.device.id if lib == "cupy" else x.device.index
    return cuda_kernels(device)  # scratch lands on x's GPU, whatever thread asks
