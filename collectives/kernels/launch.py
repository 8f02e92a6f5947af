"""Launch arithmetic for the CUDA kernels in csrc/, in plain Python.

Nothing here touches a GPU, so all of it is unit-tested anywhere (tests/test_kernels_launch.py):
which kernel serves a dtype and op, how wide a vector is, where a buffer's aligned
part starts and ends (the scalar head and tail around it), how many blocks to launch.

Every kernel walks its buffers the same way: elements [head, head + nvec*V)
as aligned vectors of V elements, the others ([0, head) and the tail) one
at a time, both in grid-stride loops. A vector access is aligned only if
the buffers are at the same position modulo their vector size. The
buffers a kernel writes must agree (else the whole buffer goes the scalar
way); an input it only reads may disagree, and is then loaded element by
element inside the vector loop (Split.loose).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..dtypes import DTYPES, KERNEL_DTYPES, dtype_name

VECTOR_BYTES = 16  # one 128-bit load or store per thread and buffer
BLOCK = 256  # threads per block; the kernels declare __launch_bounds__(256)
BLOCKS_PER_SM = 8  # the ceiling: 8 x 256 = 2048 resident threads per SM on sm_80/sm_90
# What one SM holds (sm_80 and sm_90 alike): the limits occupancy() applies.
SM_REGS = 65536
SM_THREADS = 2048
SM_BLOCKS = 32
REG_ALLOC_UNIT = 256  # registers are handed to warps in units of 256
# The fewest resident blocks of BLOCK threads per SM a kernel may leave (its registers
# decide): below half an SM's threads, too few 16-byte loads are in flight to cover
# HBM latency. tests/test_cuda_sass.py checks every kernel against it.
MIN_BLOCKS_PER_SM = 4
REDUCE_OPS = ("sum", "prod", "max", "min")
CASTS = (("float32", "bfloat16"), ("float32", "float16"), ("bfloat16", "float32"), ("float16", "float32"))
LOWP = (None, "bfloat16", "float16")


def _csrc() -> Path:
    """The CUDA sources: csrc/ at the repository's top in a checkout (or an editable
    install); collectives/kernels/csrc/ inside an installed package (setup.py copies it)."""
    top = Path(__file__).resolve().parent.parent.parent / "csrc"
    if (top / "rz_common.cuh").is_file():
        return top
    from importlib.resources import files
    return Path(str(files("collectives.kernels") / "csrc"))


CSRC = _csrc()

# Compile options, shared by NVRTC and the nvcc check (a registered file brings its own).
OPTIONS = {
    "reduce.cu": ("--std=c++17",),
    "cast.cu": ("--std=c++17",),
}
SOURCES = {"reduce.cu": CSRC, "cast.cu": CSRC}  # file -> its folder (register adds other layers' files)
_REGISTERED: dict[str, list[str]] = {}


def register(file: str, folder: Path, names: list[str], options: tuple[str, ...]) -> None:
    """Kernels of a layer above collectives (sharding's optimizer steps, sharding/kernels/):
    compiled, checked and launched like ours. ``names``: the entry points ``file`` defines;
    ``options``: its NVRTC options (rz_common.cuh is found in csrc/)."""
    SOURCES[file], OPTIONS[file], _REGISTERED[file] = Path(folder), tuple(options), list(names)


def source_path(file: str) -> Path:
    """Where a kernel file of :func:`kernel_names` lives."""
    return SOURCES[file] / file
# What NVRTC gets on top, spelled out: IEEE division and square root, and
# subnormals kept. cupy.RawModule appends -ftz=true to every compile, which
# would flush subnormal inputs and results to zero, so cuda_kernels.py
# compiles with NVRTC itself and loads the cubin.
NVRTC_IEEE = ("-ftz=false", "-prec-div=true", "-prec-sqrt=true")


# The files whose vector loops RZ_UNROLL sets (see csrc/rz_common.cuh). 8 is left out:
# 94-119 registers, 2 blocks per SM, under MIN_BLOCKS_PER_SM.
UNROLLED = ("reduce.cu", "cast.cu")
UNROLLS = (1, 2, 4)
DEFAULT_UNROLL = 4  # the #define in csrc/rz_common.cuh (tests/test_kernels_launch.py checks they agree)


def nvrtc_options(file: str, arch: str, unroll: int | None = None) -> tuple[str, ...]:
    """Every option NVRTC compiles ``file`` with for ``arch`` (e.g. "sm_90" or "compute_90").

    Args:
      unroll: vectors per thread in flight (RZ_UNROLL) for reduce.cu and cast.cu;
        None keeps the sources' default. Ignored for the other files.
    """
    if unroll is not None and unroll not in UNROLLS:
        raise ValueError(f"unroll must be one of {UNROLLS}, got {unroll}")
    defines = (f"-DRZ_UNROLL={unroll}",) if unroll is not None and file in UNROLLED else ()
    return (*OPTIONS[file], *NVRTC_IEEE, *defines, f"--gpu-architecture={arch}")


def reduce_kernel(op: str, dtype) -> str:
    """rz_reduce_<op>_<dtype>: out = op(a, b)."""
    if op not in REDUCE_OPS:
        raise ValueError(f"no reduce kernel for op {op!r}; kernels exist for {', '.join(REDUCE_OPS)}")
    return f"rz_reduce_{op}_{suffix(dtype)}"


def scale_kernel(dtype) -> str:
    """rz_scale_<dtype>: x /= divisor."""
    return f"rz_scale_{suffix(dtype)}"


def suffix(dtype) -> str:
    """The kernels' suffix for ``dtype`` (the dtype table's), or TypeError naming those they cover."""
    if DTYPES[dtype_name(dtype)].kernel is None:
        raise TypeError(f"no CUDA kernels for dtype {dtype_name(dtype)}; they cover {', '.join(KERNEL_DTYPES)}")
    return DTYPES[dtype_name(dtype)].kernel


def cast_kernel(src_dtype, dst_dtype) -> str:
    """rz_cast_<src>_<dst>; only float32 to and from the half types."""
    pair = (dtype_name(src_dtype), dtype_name(dst_dtype))
    if pair not in CASTS:
        raise TypeError(f"no cast kernel from {pair[0]} to {pair[1]}; "
                        f"casts: {', '.join(f'{s}->{d}' for s, d in CASTS)}")
    return f"rz_cast_{suffix(pair[0])}_{suffix(pair[1])}"


def kernel_names() -> dict[str, list[str]]:
    """Every entry point each .cu file must define (checked against nvcc's output)."""
    return {
        "reduce.cu": [reduce_kernel(op, d) for d in KERNEL_DTYPES for op in REDUCE_OPS],
        "cast.cu": [cast_kernel(s, d) for s, d in CASTS] + [scale_kernel(d) for d in KERNEL_DTYPES],
        **_REGISTERED,
    }


def vector_width(*itemsizes: int) -> int:
    """Elements per vector: the widest buffer's element fills VECTOR_BYTES.

    A kernel over float32 and bfloat16 buffers moves 4 elements per vector
    (16 bytes of the one, 8 of the other).
    """
    if not itemsizes or any(s <= 0 or VECTOR_BYTES % s for s in itemsizes):
        raise ValueError(f"bad element sizes {itemsizes}")
    return VECTOR_BYTES // max(itemsizes)


@dataclass(frozen=True)
class Split:
    """How n elements divide: ``head`` scalars, ``nvec`` vectors of ``width``, ``tail`` scalars.

    ``loose``: bit k set when buffer k (a read-only input) is at another phase than
    the written buffers, so the vector loop loads it element by element (the
    kernels' ``loose`` argument); its stores and the other loads stay vectors.
    """
    head: int
    nvec: int
    width: int
    tail: int
    loose: int = 0

    @property
    def vector_elems(self) -> int:
        return self.nvec * self.width

    @property
    def scalar_elems(self) -> int:
        return self.head + self.tail


def split(n: int, addresses, itemsizes, width: int, readonly=()) -> Split:
    """The head/vector/tail split of n elements over buffers at ``addresses``.

    Args:
      n: elements in each buffer.
      addresses: byte address of element 0 of each buffer.
      itemsizes: element size of each buffer, same order.
      width: elements per vector (see vector_width).
      readonly: indices of buffers the kernel only reads and can load element by
        element in its vector loop (see Split.loose).

    Element i of buffer b is vector-aligned when (addr_b + i*size_b) is a
    multiple of width*size_b. The written buffers (every buffer when all are
    written) must agree on the first such i; otherwise, or if an address is
    not even element-aligned, everything is scalar. A read-only buffer at
    another phase does not spoil the vectors: it is marked loose. So a ring
    segment at an odd offset reduced with an aligned scratch chunk still
    stores full vectors.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    addresses, itemsizes = list(addresses), list(itemsizes)
    if len(addresses) != len(itemsizes) or not addresses:
        raise ValueError("need one element size per address")
    scalar = Split(head=n, nvec=0, width=width, tail=0)
    if width <= 1:
        return Split(head=0, nvec=n, width=1, tail=0) if width == 1 else scalar
    phases = []
    for addr, size in zip(addresses, itemsizes):
        if addr % size:
            return scalar
        phases.append((addr // size) % width)
    readonly = {i for i in readonly if 0 <= i < len(phases)}
    anchor = {p for i, p in enumerate(phases) if i not in readonly} or set(phases)
    if len(anchor) != 1:
        return scalar
    phase = anchor.pop()
    loose = sum(1 << i for i in readonly if phases[i] != phase)
    head = min(n, (-phase) % width)
    nvec = (n - head) // width
    return Split(head=head, nvec=nvec, width=width, tail=n - head - nvec * width, loose=loose if nvec else 0)


def occupancy(regs_per_thread: int, block: int = BLOCK, shared_bytes: int = 0,
              sm_shared: int = 228 * 1024) -> int:
    """Blocks of ``block`` threads one SM runs at once, from the registers a thread uses.

    The same arithmetic as CUDA's occupancy calculator for sm_80/sm_90:
    each warp gets ``ceil(regs*32 / 256) * 256`` registers out of 64 Ki,
    and threads (2048), blocks (32) and shared memory cap it too. The
    device's own cuOccupancyMaxActiveBlocksPerMultiprocessor is preferred
    (cuda_kernels.py); this is its fallback and what the SASS check uses.
    """
    if regs_per_thread < 1 or block < 1:
        raise ValueError(f"bad regs_per_thread={regs_per_thread} or block={block}")
    warps = math.ceil(block / 32)
    per_warp = math.ceil(regs_per_thread * 32 / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    by_regs = SM_REGS // (per_warp * warps)
    by_shared = sm_shared // shared_bytes if shared_bytes else SM_BLOCKS
    return max(0, min(by_regs, SM_THREADS // block, SM_BLOCKS, by_shared))


def grid_size(split_: Split, sm_count: int, block: int = BLOCK, blocks_per_sm: int = BLOCKS_PER_SM) -> int:
    """Blocks to launch: enough threads for the larger loop, at most one full wave.

    Grid-stride loops cover whatever the grid does not. ``blocks_per_sm``
    is how many blocks of this kernel an SM holds at once (its occupancy,
    from its register count); capping the grid at one wave of them avoids
    a full wave followed by a ragged second one. At least 1, so empty
    launches stay legal.
    """
    if sm_count < 1 or block < 1 or blocks_per_sm < 1:
        raise ValueError(f"bad sm_count={sm_count}, block={block} or blocks_per_sm={blocks_per_sm}")
    work = max(split_.nvec, split_.head + split_.tail)
    return max(1, min(math.ceil(work / block), sm_count * blocks_per_sm))


@dataclass(frozen=True)
class Launch:
    """One kernel launch: name, grid, block and the element split."""
    name: str
    grid: int
    block: int
    split: Split


def plan(name: str, n: int, arrays: list[tuple[int, int]], sm_count: int, width: int | None = None,
         blocks_per_sm: int = BLOCKS_PER_SM, readonly=()) -> Launch:
    """Launch for kernel ``name`` over n elements of ``arrays`` = [(address, itemsize), ...].

    Args:
      name: the kernel.
      n: elements per buffer.
      arrays: (byte address, element size) of each buffer the kernel touches.
      sm_count: multiprocessors on the device.
      width: elements per vector (default: from the element sizes).
      blocks_per_sm: the kernel's occupancy (see :func:`occupancy`).
      readonly: indices into ``arrays`` of the buffers the kernel only reads (see split).
    """
    sizes = [s for _, s in arrays]
    w = vector_width(*sizes) if width is None else width
    sp = split(n, [a for a, _ in arrays], sizes, w, readonly)
    return Launch(name=name, grid=grid_size(sp, sm_count, BLOCK, blocks_per_sm), block=BLOCK, split=sp)


# ---------------------------------------------------------------- bandwidth
def bytes_moved(family: str, n: int, itemsize: int = 4, *, src_itemsize: int | None = None,
                lowp: bool = False, momentum: bool = True) -> int:
    """Bytes a kernel reads plus writes for n elements (the headers of the .cu files say the same).

    Args:
      family: "reduce", "scale", "cast", "adamw", "sgd" or "copy".
      itemsize: element size (the destination's for cast).
      src_itemsize: the source's element size, for cast.
      lowp: the optimizer also writes a 2-byte copy of the weights.
      momentum: SGD with a momentum buffer.
    """
    if family == "reduce":
        return 3 * itemsize * n
    if family in ("scale", "copy"):
        return 2 * itemsize * n
    if family == "cast":
        if src_itemsize is None:
            raise ValueError("cast needs src_itemsize")
        return (src_itemsize + itemsize) * n
    extra = 2 if lowp else 0
    if family == "adamw":
        return (28 + extra) * n
    if family == "sgd":
        return ((20 if momentum else 12) + extra) * n
    raise ValueError(f"unknown kernel family {family!r}")
