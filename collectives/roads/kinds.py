"""The road table's nouns: every road (Road), its row (what it serves, when it is taken, the
settings behind it), the facts a call's road depends on, and the answer (Choice)."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from ..dtypes import COLLECTIVES, DATA_COLLECTIVES
from ..safety.agree import MAX_SMALL_BYTES  # noqa: F401  (a fact forced.py checks)

MAX_MESSAGE_BYTES = 1 << 30  # one point-to-point message: MPI counts are C ints (a 2 GiB + 4 KiB one failed)
DATA = DATA_COLLECTIVES


class Road(str, enum.Enum):
    MPI = "mpi"
    NCCL = "nccl"
    SMALL = "small"
    PAIR = "pair"
    RING = "ring"
    DEVICE_RING = "device-ring"
    CUDA_RING = "cuda-ring"
    DIRECT = "direct"
    ONE_PHASE = "one-phase"
    PUSH = "push"
    STAGED_RING = "staged-ring"
    PIPE = "pipe"
    HIER = "hier"

    def __str__(self) -> str:
        return self.value


class Row(NamedTuple):
    road: Road
    serves: tuple
    what: str
    when: str
    settings: tuple  # tuning settings its conditions use (their sources say where they were measured)


ROWS = (
    Row(Road.MPI, DATA, "MPI's own collective (the 'mpi' algorithm, a baseline behind our API)",
        "Communicator(algorithm='mpi')", ()),
    Row(Road.NCCL, DATA, "NCCL's collective (the 'nccl' algorithm, device arrays)", "Communicator(algorithm='nccl')", ()),
    Row(Road.SMALL, COLLECTIVES[:3] + ("barrier",), "the data rides in the header exchange (recursive doubling)",
        "all-reduces up to small_bytes, reduce-scatters and all-gathers up to a quarter of it; every barrier "
        "outside the heap", ("small_bytes",)),
    Row(Road.PAIR, DATA, "two ranks: each segment or piece as one message (in place, blocks through bounded scratch)",
        "two ranks, host arrays, above SMALL", ("pair_inplace_bytes",)),
    Row(Road.RING, DATA, "the chunked, pipelined ring over point-to-point messages (host/ring.py)",
        "host arrays above SMALL on three or more ranks", ("chunk_bytes",)),
    Row(Road.DEVICE_RING, DATA, "the ring over the device transport (IPC, CUDA-aware MPI or staging)",
        "device arrays above SMALL", ("device_chunk_bytes",)),
    Row(Road.CUDA_RING, ("all_reduce", "reduce_scatter", "all_gather"),
        "one kernel launch runs every step: the chunked ring, or a one-/two-shot kernel (gpu_ring/)",
        "device arrays above SMALL, one rank per process, where the kernels can serve the call (cuda_ring on)",
        ("cuda_ring", "cuda_oneshot_max_bytes", "cuda_twoshot_max_bytes", "cuda_slot_bytes")),
    Row(Road.DIRECT, DATA + ("barrier",), "every rank reads its peers' heap buffers in place (pull)",
        "heap arrays, or staged ordinary ones, on one node, where no other direct road applies; private "
        "all-reduces past stage_max_all_reduce (out of place from cma_min_all_reduce) up to cma_max_all_reduce, "
        "read with process_vm_readv",
        ("stage", "cma", "cma_min_bytes", "stage_max_in_place", "cma_min_all_reduce", "cma_max_all_reduce",
         "cma_chunk_bytes", "reduce_chunk_bytes", "stream_min_bytes")),
    Row(Road.ONE_PHASE, ("all_reduce",), "every rank reduces the whole vector from its peers' buffers",
        "direct all-reduces up to one_phase_bytes; on two ranks staged ones, and heap ones up to one_phase_2_bytes "
        "that neither push nor reduce in place", ("one_phase_bytes", "one_phase_2_bytes")),
    Row(Road.PUSH, ("all_reduce", "all_gather"), "each owner writes its segment or piece into every rank's out",
        "every out in the heap (and clear of its input); all-gathers from push_min_all_gather",
        ("push_chunk_bytes", "push_min_all_gather")),
    Row(Road.STAGED_RING, DATA, "the headers checked in shared memory, then the ring over point-to-point messages",
        "staged calls above stage_max_* (auto staging)", ("stage_max_all_reduce", "stage_max_reduce_scatter",
                                                          "stage_max_all_gather", "stage_max_broadcast")),
    Row(Road.PIPE, ("all_reduce", "all_gather"), "chunks through shared-memory slots with streaming stores, in C",
        "staged all-reduces from pipe_min_all_reduce, all-gathers from pipe_min_all_gather where set (auto staging)",
        ("pipe", "pipe_min_all_reduce", "pipe_min_all_gather", "pipe_chunk_bytes", "pipe_depth")),
    Row(Road.HIER, DATA + ("barrier",), "direct within each node, the ring between nodes on rails",
        "heap arrays on several nodes", ("node_size",)),
)
BY_ROAD = {row.road: row for row in ROWS}
DIRECT_ROADS = frozenset({Road.DIRECT, Road.ONE_PHASE, Road.PUSH, Road.STAGED_RING, Road.PIPE})
IN_C = frozenset({Road.DIRECT, Road.ONE_PHASE, Road.PUSH})  # repeated calls may run as C programs (fast/)


@dataclass(frozen=True)
class Facts:
    """What a call's road depends on. Sizes are bytes and agreed by the header.

    Attributes:
      collective: one of COLLECTIVES.
      nbytes: an all-reduce's or reduce-scatter's input, an all-gather's out, a broadcast's buffer.
      piece: the largest segment (all-gather: piece) in bytes, what a stage or one message holds.
      world, nodes: ranks, and nodes they span.
      algorithm: "ring", "mpi" or "nccl".
      device: device arrays.
      kernel_ring: the communicator's GPU kernel ring is connected and can serve this call.
      direct: the call is on the direct path (heap arrays, or staging on).
      in_place: out is x.
      staged, pushable, overlap: from the header post (None before it): some rank's input
        is staged; every out is in the heap, clear of its input (all-gathers: every input
        too); some rank's out overlaps its heap input.
    """

    collective: str
    nbytes: int = 0
    piece: int = 0
    dtype: object = None
    op: str | None = None
    world: int = 1
    nodes: int = 1
    algorithm: str = "ring"
    device: bool = False
    kernel_ring: bool = False
    direct: bool = False
    in_place: bool = False
    staged: bool | None = None
    pushable: bool | None = None
    overlap: bool | None = None


class Choice(NamedTuple):
    road: Road
    why: str
    pending: bool = False  # a direct road decided after the header post
