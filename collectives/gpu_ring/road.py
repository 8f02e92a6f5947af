"""Whether the GPU kernel road can serve a call, and with which kernel: a row of a road table.

    v = can_serve("all_reduce", np.float32, "sum", nbytes=1 << 20, world=4)
    v.ok, v.reason, v.kernel           # True, "...", "twoshot"

Pure functions of the call's facts; the thresholds are tuning.py's (unmeasured).
``nbytes`` is always the whole buffer: the all-reduce's input, the reduce-scatter's
input, the all-gather's output. avg is not an op of these kernels: the dispatcher's
rule (divide floating inputs by N, then sum; integers sum then divide) runs around
the road, which then sees "sum".
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import KERNEL_DTYPES, dtype_name
from . import layout, tuning
from .plan import COLLECTIVES
from .source import OPS

ROAD = "cuda-ring"


@dataclass(frozen=True)
class Verdict:
    """Whether the road serves the call; why not; and which kernel it would run."""
    ok: bool
    reason: str
    kernel: str = ""  # "ring", "oneshot" or "twoshot"


def kernel_kind(collective: str, nbytes: int, stage_bytes: int = tuning.STAGE_BYTES, all_peers: bool = True) -> str:
    """One-shot, two-shot or the ring for a call of ``nbytes`` (tuning.py's crossovers).

    Args:
      collective: reduce_scatter, all_gather or all_reduce.
      nbytes: the whole buffer's bytes.
      stage_bytes: one staging area of the workspace (the small kernels' limit).
      all_peers: every rank's workspace is mapped here (the small kernels read them all).
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    if all_peers:
        if collective == "all_reduce":
            if nbytes <= min(tuning.ONESHOT_MAX_BYTES, stage_bytes):
                return "oneshot"
            if nbytes <= min(tuning.TWOSHOT_MAX_BYTES, stage_bytes):
                return "twoshot"
        elif nbytes <= min(tuning.SMALL_MAX_BYTES, stage_bytes):
            return "oneshot"
    return "ring"


def can_serve(collective: str, dtype, op: str | None, nbytes: int, world: int, *, device: bool = True,
              one_node: bool = True, element_aligned: bool = True, coresident: bool = True,
              stage_bytes: int = tuning.STAGE_BYTES, all_peers: bool = True) -> Verdict:
    """Can the GPU kernel ring serve this call? The first reason it cannot, else the kernel.

    Args:
      collective: reduce_scatter, all_gather or all_reduce (broadcast is not a kernel here).
      dtype: the element type (numpy dtype or name).
      op: sum, prod, max or min (avg arrives as sum, see the module docstring); None for all_gather.
      nbytes: the whole buffer's bytes.
      world: ranks.
      device: every rank's buffers are device memory.
      one_node: every rank is on this node (the workspaces are mapped through CUDA IPC).
      element_aligned: every buffer starts on a multiple of its element size.
      coresident: residency.py said the ranks' blocks can all run at once (virtual ranks
        fit the SMs, processes sharing a GPU passed the MPS probe).
      stage_bytes: the workspace's staging area.
      all_peers: every rank's workspace is mapped (else only the ring kernel is possible).
    """
    if collective not in COLLECTIVES:
        return Verdict(False, f"{collective} is not a collective of the GPU kernel ring")
    try:
        name = dtype_name(dtype)
    except TypeError:
        name = None
    if name not in KERNEL_DTYPES:
        return Verdict(False, f"dtype {dtype} is not one of the kernels' {', '.join(KERNEL_DTYPES)}")
    if collective != "all_gather" and op not in OPS:
        return Verdict(False, f"op {op!r}: the kernels reduce with {', '.join(OPS)} (avg as sum around them)")
    if not 2 <= world <= layout.MAX_RANKS:
        return Verdict(False, f"world {world}: the kernels serve 2..{layout.MAX_RANKS} ranks (1 is a copy)")
    if not device:
        return Verdict(False, "host memory: the GPU kernel ring needs device buffers on every rank")
    if not one_node:
        return Verdict(False, "ranks on other nodes: workspaces are mapped through CUDA IPC within a node only")
    if not element_aligned:
        return Verdict(False, f"a buffer is not aligned to its {name} element size")
    if not coresident:
        return Verdict(False, "the ranks' blocks cannot all be resident (residency.py refused)")
    if nbytes < 0:
        return Verdict(False, f"negative size {nbytes}")
    kind = kernel_kind(collective, nbytes, stage_bytes, all_peers)
    return Verdict(True, f"{collective} of {nbytes} bytes of {name} on {world} ranks: {kind} kernel", kind)


def channels(nbytes: int, max_channels: int, nlocal: int = 1, sm_count: int | None = None) -> int:
    """Ring channels for a call: one per tuning.CHANNEL_MIN_BYTES, at least 1, at most
    ``max_channels``, and no more than the SMs leave for each of the ``nlocal`` ranks here."""
    want = max(1, min(max_channels, -(-nbytes // tuning.CHANNEL_MIN_BYTES)))
    if sm_count is not None:
        want = max(1, min(want, sm_count // max(1, nlocal)))
    return want


def small_blocks(nbytes: int, max_blocks: int, nlocal: int = 1, sm_count: int | None = None) -> int:
    """Blocks per rank of a one-/two-shot kernel: one per tuning.SMALL_BLOCK_BYTES."""
    want = max(1, min(max_blocks, -(-nbytes // tuning.SMALL_BLOCK_BYTES)))
    if sm_count is not None:
        want = max(1, min(want, sm_count // max(1, nlocal)))
    return want
