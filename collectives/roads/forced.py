"""Forced roads: how ``Communicator(road=...)`` and ``COLLECTIVES_ROAD`` are spelt, and whether
a forced road can serve a call (``check`` raises RoadError saying why not)."""
from __future__ import annotations

from ..dtypes import COLLECTIVES
from ..errors import RoadError
from ..fast.codes import c_reduces, has_c
from .kinds import BY_ROAD, DIRECT_ROADS, MAX_MESSAGE_BYTES, MAX_SMALL_BYTES, Facts, Road


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


def check(f: Facts, t, road: Road) -> None:
    c, row = f.collective, BY_ROAD[road]
    why = None
    if c not in row.serves:
        why = f"it serves {', '.join(row.serves)}, not {c}"
    elif road in (Road.MPI, Road.NCCL) and f.algorithm != road.value:
        why = f"it needs Communicator(algorithm={road.value!r})"
    elif f.device and road not in (Road.SMALL, Road.DEVICE_RING, Road.CUDA_RING, Road.NCCL):
        why = "the arrays are device arrays (roads for them: small, device-ring, cuda-ring)"
    elif not f.device and road in (Road.DEVICE_RING, Road.CUDA_RING, Road.NCCL):
        why = "the arrays are host arrays"
    elif road is Road.CUDA_RING and not f.kernel_ring:
        why = "no GPU kernel ring can serve it here (no cupy or GPU, ranks that share a GPU without MPS, " \
              "or a call the kernels do not cover: gpu_ring.road.can_serve)"
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
