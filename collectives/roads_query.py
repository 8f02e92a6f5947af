"""``Communicator.road``: which road a call would take, and why, without running it.

The call is checked and planned as it would be (plan.py, so a bad argument
raises as the call would); a direct road, which depends on where every rank's
buffers live, is answered assuming every rank passes arrays like these.
"""
from __future__ import annotations

from dataclasses import replace

from . import plan, roads
from .dispatch import _sizes
from .dtypes import COLLECTIVES
from .roads import Choice, Facts, Road
from .symmetric.cma import offers


def query(comm, collective: str, x, out, op, counts, root) -> Choice:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; collectives: {', '.join(COLLECTIVES)}")
    if collective == "barrier":
        p, xa, oa = plan.barrier(comm), None, None
    elif x is None:
        raise TypeError(f"road({collective!r}) needs the call's x")
    elif collective == "all_reduce":
        p, xa, oa = plan.all_reduce(comm, None, x, op, out)
    elif collective == "reduce_scatter":
        p, xa, oa = plan.reduce_scatter(comm, None, x, op, out, counts)
    elif collective == "all_gather":
        p, xa, oa = plan.all_gather(comm, None, x, out, counts)
    else:
        p, xa, oa = plan.broadcast(comm, None, x, root, out)
    forced = comm.forced.get(collective)
    if p.road not in roads.DIRECT_ROADS:
        why = "forced" if forced is not None else _why(comm, p, xa, oa)
        return Choice(p.road, why)
    return _direct(comm, collective, p, xa, oa, forced)


def _why(comm, p, xa, oa) -> str:
    args = p.args[1:] if p.args and isinstance(p.args[0], Road) else p.args
    nbytes, piece = _sizes(p.kind, xa, oa, args, comm.size)
    f = Facts(p.kind, nbytes, piece, None if xa is None else xa.dtype, None, comm.size, 1, comm.algorithm,
              xa is not None and xa.device, False, p.in_place)
    return roads.choose(f, comm.tuning).why


def _direct(comm, kind, p, xa, oa, forced) -> Choice:
    """A direct road: the facts the header post would give if every rank passed arrays like these."""
    if xa is None:  # the barrier: flags in the heap, nothing posted to decide on
        return roads.choose(Facts(kind, 0, 0, None, None, comm.size, direct=True), comm.tuning, forced)
    heap = comm.symmetric.heap
    xloc = heap.locate(xa.host)
    oloc = heap.locate(oa.host) if oa is not None else None
    x = xa.host.reshape(-1)
    args = p.args[:-2] if kind in ("all_reduce", "all_gather") else p.args[:-1]  # less the heap places
    nbytes, piece = _sizes(kind, xa, oa, args, comm.size)
    if kind != "all_gather":
        piece = nbytes  # the direct roads weigh a reduction's or broadcast's whole input (symmetric/)
    f = Facts(kind, nbytes, piece, xa.dtype, args[0] if kind in ("all_reduce", "reduce_scatter") else None,
              comm.size, direct=True, in_place=p.in_place)
    d = comm.symmetric.direct
    if kind == "all_reduce" and d.all_reduce_.offers(x, oa.host.reshape(-1), args[0], xloc, oloc):
        return Choice(Road.DIRECT, f"{nbytes} bytes past stage_max_all_reduce (out of place: from "
                                   "cma_min_all_reduce) up to cma_max_all_reduce: every rank's x and out read in place "
                                   "(assuming every rank passes arrays like these)")
    offered = kind in ("all_gather", "broadcast") and offers(d, kind, x, None if oa is None else oa.host, xloc, piece)
    staged = xloc is None and not offered
    if kind == "all_gather":
        pushable = xloc is not None and oloc is not None
    else:
        pushable = oloc is not None and (xloc is None or oloc == xloc or oloc[0] != xloc[0]
                                         or abs(oloc[1] - xloc[1]) >= x.nbytes)
    overlap = xloc is not None and oloc is not None and oloc[0] == xloc[0] and abs(oloc[1] - xloc[1]) < x.nbytes
    c = roads.choose(replace(f, staged=staged, pushable=pushable, overlap=overlap), comm.tuning, forced)
    return Choice(c.road, c.why + " (assuming every rank passes arrays like these)")
