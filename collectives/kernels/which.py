"""Which library an array comes from (numpy, cupy, torch on the CPU or CUDA), without
importing cupy or torch: the type's module name says."""
from __future__ import annotations

import numpy as np


def library(x) -> str:
    t = type(x)
    if t is np.ndarray:
        return "numpy"
    mod = t.__module__
    if mod.startswith("cupy"):
        return "cupy"
    if mod == "torch" or mod.startswith("torch."):
        return "torch-cuda" if x.device.type == "cuda" else "torch"
    return "numpy"


def is_device_array(x) -> bool:
    """True for cupy arrays and CUDA torch tensors, without importing either library."""
    return library(x) in ("cupy", "torch-cuda")
