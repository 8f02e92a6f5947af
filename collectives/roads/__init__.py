"""Every road a collective can take, and the one function that chooses it.

A road is one algorithm on one kind of memory. ``choose(facts, tuning)`` picks
it from the call's facts (collective, bytes, dtype, op, world and node layout,
heap or device or neither, algorithm) and the tuning table, or checks a forced
one (``Communicator(road=...)``, ``COLLECTIVES_ROAD``). The direct roads
depend on where every rank's buffers live, which only the header post tells
(symmetric/direct.py): before it, ``choose`` answers DIRECT with ``pending``
set, and the direct path asks again with the posted facts. Nothing else
decides; an algorithm file never asks whether it should run.

    python -m collectives.roads      # every road: what it serves, when it is taken, where measured
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from ..dtypes import COLLECTIVES, DATA_COLLECTIVES
from ..errors import RoadError
from ..fast.codes import c_reduces, has_c
from ..safety.agree import MAX_SMALL_BYTES

MAX_MESSAGE_BYTES = 1 << 30  # one point-to-point message: MPI counts are C ints (a 2 GiB + 4 KiB one failed)
DATA = DATA_COLLECTIVES


class Road(str, enum.Enum):
    MPI = "mpi"
    NCCL = "nccl"
    SMALL = "small"
    PAIR = "pair"
    RING = "ring"
    DEVICE_RING = "device-ring"
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
    Row(Road.PAIR, DATA, "two ranks: each segment or piece as one message", "two ranks, host arrays, above SMALL",
        ("pair_inplace_bytes",)),
    Row(Road.RING, DATA, "the chunked, pipelined ring over point-to-point messages (host/ring.py)",
        "host arrays above SMALL on three or more ranks", ("chunk_bytes",)),
    Row(Road.DEVICE_RING, DATA, "the ring over the device transport (IPC, CUDA-aware MPI or staging)",
        "device arrays above SMALL", ("device_chunk_bytes",)),
    Row(Road.DIRECT, DATA + ("barrier",), "every rank reads its peers' heap buffers in place (pull)",
        "heap arrays, or staged ordinary ones, on one node, where no other direct road applies",
        ("stage", "cma", "cma_min_bytes", "reduce_chunk_bytes")),
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
        "staged all-reduces from pipe_min_all_reduce, all-gathers from pipe_min_all_gather (auto staging)",
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
    direct: bool = False
    in_place: bool = False
    staged: bool | None = None
    pushable: bool | None = None
    overlap: bool | None = None


class Choice(NamedTuple):
    road: Road
    why: str
    pending: bool = False  # a direct road decided after the header post


def parse(spec) -> dict:
    """A forced road: a Road or name (every collective it serves), a dict, or
    "collective:road,..." (COLLECTIVES_ROAD). Returns {collective: Road}."""
    if not spec:
        return {}
    if isinstance(spec, dict):
        return {c: _road(r) for c, r in spec.items() if _known(c)}
    if isinstance(spec, Road) or ":" not in str(spec):
        road = _road(spec)
        return dict.fromkeys(BY_ROAD[road].serves, road)
    out = {}
    for part in str(spec).split(","):
        c, _, r = part.partition(":")
        out[c.strip()] = _road(r.strip()) if _known(c.strip()) else None
    return out


def _known(c: str) -> bool:
    if c not in COLLECTIVES:
        raise RoadError(f"unknown collective {c!r} in a forced road; collectives: {', '.join(COLLECTIVES)}")
    return True


def _road(r) -> Road:
    try:
        return Road(r)
    except ValueError:
        raise RoadError(f"unknown road {r!r}; roads: {', '.join(x.value for x in Road)}") from None


def choose(f: Facts, t, forced: Road | None = None) -> Choice:
    """The road of a call with facts ``f`` under tuning ``t``, or ``forced`` after checking
    that it can serve the call (RoadError saying why not)."""
    if forced is not None:
        _serves(f, t, forced)
        return Choice(forced, "forced", forced in DIRECT_ROADS and f.staged is None)
    c = f.collective
    if f.algorithm in ("mpi", "nccl"):
        road = Road(f.algorithm)
        return Choice(road, f"algorithm={f.algorithm!r}") if c != "barrier" else Choice(Road.SMALL, "a barrier is "
                                                                                      "the header exchange")
    if f.direct and not f.device:
        if f.nodes > 1:
            return Choice(Road.HIER, f"the direct path on {f.nodes} nodes")
        return _direct(f, t)
    if c == "barrier":
        return Choice(Road.SMALL, "a barrier is the header exchange")
    if _small(f, t):
        return Choice(Road.SMALL, f"{f.nbytes} bytes ride in the header exchange (small_bytes={t.small_bytes})")
    if f.device:
        return Choice(Road.DEVICE_RING, "device arrays")
    road = point_to_point(f, t)
    return Choice(road, "two ranks: one message a segment" if road is Road.PAIR else f"host arrays on {f.world} ranks")


def point_to_point(f: Facts, t) -> Road:
    """PAIR or RING: the road over point-to-point messages for host arrays (also what a
    staged call above its stage limit runs once its headers agree in shared memory)."""
    return Road.PAIR if f.world == 2 and _pair_fits(f, t) else Road.RING


def _small(f: Facts, t) -> bool:
    if f.collective == "all_reduce":
        return f.nbytes <= t.small_bytes
    return f.collective != "broadcast" and f.nbytes <= t.small_bytes // 4


def _pair_fits(f: Facts, t) -> bool:
    if f.collective == "all_gather":
        return True  # pieces larger than one message are split (host/pair.py)
    limit = t.pair_inplace_bytes if f.collective == "all_reduce" and f.in_place else MAX_MESSAGE_BYTES
    return f.piece <= limit


def _direct(f: Facts, t) -> Choice:
    """Among the direct roads (one node), from the posted facts."""
    c = f.collective
    if c == "barrier":
        return Choice(Road.DIRECT, "flags in shared memory")
    if f.staged is None:
        return Choice(Road.DIRECT, "decided after the header post", True)
    if f.staged:
        if _piped(f, t):
            return Choice(Road.PIPE, f"staged, {f.nbytes} bytes from pipe_min_{c}")
        if t.stage == "auto" and f.piece > getattr(t, "stage_max_" + c):
            return Choice(Road.STAGED_RING, f"staged, {f.piece} bytes above stage_max_{c}")
    if c == "all_reduce":
        if _one_phase(f, t):
            return Choice(Road.ONE_PHASE, "small, or two ranks reading clean inputs")
        if f.pushable:
            return Choice(Road.PUSH, "every out in the heap")
    if c == "all_gather" and f.pushable and f.nbytes >= t.push_min_all_gather:
        return Choice(Road.PUSH, "every input and out in the heap")
    return Choice(Road.DIRECT, "read in place")


def _piped(f: Facts, t) -> bool:
    c = f.collective
    if c not in ("all_reduce", "all_gather") or not t.pipe or not has_c():
        return False
    explicit = t.origin("pipe_min_" + c) != "default"
    if (t.stage != "auto" and not explicit) or f.nbytes < getattr(t, "pipe_min_" + c):
        return False
    return c == "all_gather" or c_reduces(f.dtype, f.op, pipe=True)


def _one_phase(f: Facts, t) -> bool:
    if f.nbytes <= t.one_phase_bytes:
        return True
    if f.world != 2:
        return False
    two_phases = f.pushable or f.overlap
    return f.staged or (f.nbytes <= t.one_phase_2_bytes and not two_phases)


def _serves(f: Facts, t, road: Road) -> None:
    c, row = f.collective, BY_ROAD[road]
    why = None
    if c not in row.serves:
        why = f"it serves {', '.join(row.serves)}, not {c}"
    elif road in (Road.MPI, Road.NCCL) and f.algorithm != road.value:
        why = f"it needs Communicator(algorithm={road.value!r})"
    elif f.device and road not in (Road.SMALL, Road.DEVICE_RING, Road.NCCL):
        why = "the arrays are device arrays (roads for them: small, device-ring)"
    elif not f.device and road in (Road.DEVICE_RING, Road.NCCL):
        why = "the arrays are host arrays"
    elif road is Road.SMALL and f.nbytes > MAX_SMALL_BYTES:
        why = f"{f.nbytes} bytes do not fit in a header message (at most {MAX_SMALL_BYTES})"
    elif road is Road.PAIR and f.world != 2:
        why = f"it needs two ranks, this group has {f.world}"
    elif road is Road.PAIR and c != "all_gather" and f.piece > MAX_MESSAGE_BYTES:
        why = f"a {f.piece}-byte segment exceeds one message ({MAX_MESSAGE_BYTES})"
    elif road in DIRECT_ROADS | {Road.HIER} and not f.direct:
        why = "the call is not on the direct path (no heap arrays, and staging is off)"
    elif road in DIRECT_ROADS and f.nodes > 1:
        why = f"the group spans {f.nodes} nodes (the road there: hier)"
    elif road is Road.HIER and f.nodes < 2:
        why = "the group is one node"
    elif road is Road.PIPE and not has_c():
        why = "the C extension (collectives._fastpath) was not built"
    elif road is Road.PIPE and c == "all_reduce" and not c_reduces(f.dtype, f.op, pipe=True):
        why = f"the pipe's C loop has no {f.op} of {f.dtype}"
    elif road is Road.PUSH and f.pushable is False:
        why = "not every rank's out is in the heap, clear of its input" + (" (and every input)" if c == "all_gather"
                                                                            else "")
    if why:
        raise RoadError(f"the forced road {road.value!r} cannot serve this {c}: {why}")


def table(t=None) -> str:
    """The road table as text: every road, what it serves, when it is taken, and the
    tuning settings behind it with where they were measured."""
    from ..tuning import BY_NAME, load
    t = t if t is not None else load()
    lines = []
    for row in ROWS:
        c = " (repeated calls run as C programs)" if row.road in IN_C else ""
        lines += [f"{row.road.value}: {row.what}{c}", f"    serves: {', '.join(row.serves)}",
                  f"    taken: {row.when}"]
        for name in row.settings:
            s = BY_NAME[name]
            lines.append(f"    {name} = {getattr(t, name)!r}: measured {s.source}")
    return "\n".join(lines)
