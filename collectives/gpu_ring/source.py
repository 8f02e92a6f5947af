"""The ring kernels as text: where csrc/ring/ is, every entry point, and what compilers get.

The sources live in csrc/ring/ in a checkout (an installed package carries them in
collectives/gpu_ring/kernels/, copied by setup.py) and include csrc/rz_common.cuh.
:func:`kernel_source` inlines the local includes, as NVRTC needs (it has no
include path of ours); the same text goes to nvcc (tests/test_ring_sass.py) and to
g++ with csrc/ring/host_shim.h (the host build). Nothing here needs a GPU.
"""
from __future__ import annotations

from pathlib import Path

from ..dtypes import DTYPES, KERNEL_DTYPES, dtype_name
from ..kernels.includes import inline_includes

FILES = ("ring.cu", "ring_small.cu")
OPS = ("sum", "prod", "max", "min")
SUFFIX = {name: DTYPES[name].kernel for name in KERNEL_DTYPES}  # the dtype table's kernel suffixes
BLOCK = 512  # threads per block on a GPU (RZ_BLOCK, the kernels' __launch_bounds__)
# what NVRTC and nvcc get: IEEE division and no flush of subnormals, as collectives/kernels does
OPTIONS = ("--std=c++17", "-ftz=false", "-prec-div=true", "-prec-sqrt=true")


def source_dirs() -> list[Path]:
    """Where includes are looked up: the ring's own folder, then csrc/ (rz_common.cuh)."""
    here = Path(__file__).resolve().parent
    top = here.parent.parent / "csrc"
    if (top / "ring" / "ring.cu").is_file():
        return [top / "ring", top]
    return [here / "kernels", here.parent / "kernels" / "csrc"]  # an installed package


def kernel_source(file: str, dirs: list[Path] | None = None) -> str:
    """The text a compiler gets for ``file`` (ring.cu or ring_small.cu): includes inlined.

    Args:
      file: a file of csrc/ring/.
      dirs: folders to look in instead of :func:`source_dirs` (e.g. a mutated copy).
    """
    dirs = source_dirs() if dirs is None else [Path(d) for d in dirs]

    path = next((d / file for d in dirs if (d / file).is_file()), None)
    if path is None:
        raise FileNotFoundError(f"{file} not found in {', '.join(map(str, dirs))}")
    return inline_includes(path, dirs)


def ring_kernel(collective: str, op: str | None, dtype) -> str:
    """Entry point of the ring: rz_ring_<rs|ar>_<op>_<dtype>, or rz_ring_ag (bytes).

    Args:
      collective: "reduce_scatter", "all_gather" or "all_reduce".
      op: sum, prod, max or min (ignored for the all-gather).
      dtype: the element type.
    """
    if collective == "all_gather":
        return "rz_ring_ag"
    short = {"reduce_scatter": "rs", "all_reduce": "ar"}.get(collective)
    if short is None:
        raise ValueError(f"no ring kernel for {collective!r}")
    return f"rz_ring_{short}_{_op(op)}_{SUFFIX[dtype_name(dtype)]}"


def small_kernel(kind: str, collective: str, op: str | None, dtype) -> str:
    """Entry point of a small kernel: rz_<oneshot|twoshot>_<ar|rs>_<op>_<dtype>, rz_oneshot_ag.

    Args:
      kind: "oneshot" or "twoshot" (all-reduce only).
      collective: "all_reduce", "reduce_scatter" or "all_gather".
      op: the reduction (ignored for the all-gather).
      dtype: the element type.
    """
    if kind == "oneshot" and collective == "all_gather":
        return "rz_oneshot_ag"
    short = {("oneshot", "all_reduce"): "oneshot_ar", ("oneshot", "reduce_scatter"): "oneshot_rs",
             ("twoshot", "all_reduce"): "twoshot_ar"}.get((kind, collective))
    if short is None:
        raise ValueError(f"no {kind} kernel for {collective!r}")
    return f"rz_{short}_{_op(op)}_{SUFFIX[dtype_name(dtype)]}"


def _op(op) -> str:
    if op not in OPS:
        raise ValueError(f"the ring kernels reduce with {', '.join(OPS)}, not {op!r} (avg: sum, then scale)")
    return op


def kernel_names() -> dict[str, list[str]]:
    """Every entry point each file defines (the SASS test and the host build check them)."""
    ring, small = ["rz_ring_ag"], ["rz_oneshot_ag"]
    for d in KERNEL_DTYPES:
        for op in OPS:
            ring += [ring_kernel("reduce_scatter", op, d), ring_kernel("all_reduce", op, d)]
            small += [small_kernel("oneshot", "all_reduce", op, d), small_kernel("oneshot", "reduce_scatter", op, d),
                      small_kernel("twoshot", "all_reduce", op, d)]
    return {"ring.cu": ring, "ring_small.cu": small + ["rz_probe"]}


def file_of(name: str) -> str:
    """The file that defines entry point ``name``."""
    for file, names in kernel_names().items():
        if name in names:
            return file
    raise KeyError(f"no ring kernel named {name!r}")
