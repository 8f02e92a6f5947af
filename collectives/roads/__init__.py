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

from ..fast.codes import c_reduces, has_c
from .forced import check, parse
from .kinds import (BY_ROAD, DATA, DIRECT_ROADS, IN_C, MAX_MESSAGE_BYTES, MAX_SMALL_BYTES, ROWS, Choice, Facts,
                    Road, Row)

__all__ = ["BY_ROAD", "DATA", "DIRECT_ROADS", "IN_C", "MAX_MESSAGE_BYTES", "MAX_SMALL_BYTES", "ROWS", "Choice",
           "Facts", "Road", "Row", "choose", "parse", "point_to_point", "table"]


def choose(f: Facts, t, forced: Road | None = None) -> Choice:
    """The road of a call with facts ``f`` under tuning ``t``, or ``forced`` after checking
    that it can serve the call (RoadError saying why not)."""
    if forced is not None:
        check(f, t, forced)
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
        if f.kernel_ring:
            return Choice(Road.CUDA_RING, "device arrays: the GPU kernel ring")
        return Choice(Road.DEVICE_RING, "device arrays")
    road = point_to_point(f, t)
    return Choice(road, "two ranks: one message a segment" if road is Road.PAIR else f"host arrays on {f.world} ranks")


def point_to_point(f: Facts, t) -> Road:
    """PAIR or RING: the road over point-to-point messages for host arrays (also what a
    staged call above its stage limit runs once its headers agree in shared memory)."""
    return Road.PAIR if f.world == 2 and _pair_fits(f) else Road.RING


def _small(f: Facts, t) -> bool:
    if f.collective == "all_reduce":
        return f.nbytes <= t.small_bytes
    return f.collective != "broadcast" and f.nbytes <= t.small_bytes // 4


def _pair_fits(f: Facts) -> bool:
    if f.collective == "all_gather" or (f.collective == "all_reduce" and f.in_place):
        return True  # pieces larger than one message are split; in place, blocks through scratch (host/pair.py)
    return f.piece <= MAX_MESSAGE_BYTES


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
    least = getattr(t, "pipe_min_" + c)
    if least <= 0 or (t.stage != "auto" and not explicit) or f.nbytes < least:
        return False
    return c == "all_gather" or c_reduces(f.dtype, f.op, pipe=True)


def _one_phase(f: Facts, t) -> bool:
    if f.nbytes <= t.one_phase_bytes:
        return True
    if f.world != 2:
        return False
    two_phases = f.pushable or f.overlap
    return f.staged or (f.nbytes <= t.one_phase_2_bytes and not two_phases)


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
            lines.append(f"    {name} = {getattr(t, name)!r}; where: {s.source}")
    return "\n".join(lines)

