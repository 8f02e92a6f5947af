"""One registry for kernel sets: numpy for host arrays, CUDA for cupy arrays."""
from __future__ import annotations

import numpy as np

from .numpy_kernels import NUMPY_KERNELS, NumpyKernels

__all__ = ["NUMPY_KERNELS", "NumpyKernels", "is_device_array", "kernels_for"]


def is_device_array(x) -> bool:
    """True for cupy (CUDA) arrays, without importing cupy when it is absent."""
    t = type(x)
    return t is not np.ndarray and t.__module__.startswith("cupy")


def kernels_for(x):
    """The kernel set that reduces arrays like ``x``."""
    if is_device_array(x):
        try:
            from .cuda_kernels import cuda_kernels
        except ImportError as e:  # cupy present but our CUDA set could not load
            raise RuntimeError(f"cupy array given but the CUDA kernel set is unavailable: {e}") from e
        return cuda_kernels(x.device.id)  # scratch lands on x's GPU, whatever thread asks
    return NUMPY_KERNELS
