"""A call's checks: what a collective decides from its arguments, once per call
shape (plan_cache.py keeps the result, a :class:`Plan`, for the calls after).

Each collective adapts its arrays (arrays.py), checks them (dtype, size,
contiguity, writability, counts, root, op, the aliasing rule), builds its
header (safety/header.py), and ``finish`` asks for its road (dispatch.route,
roads.choose) and caches the plan.
"""
from __future__ import annotations

import numbers

import numpy as np

from .arrays import NUMPY, Array, adapt, check_overlap
from .dispatch import IN_C, route
from .dtypes import check_reduction, dtype_code
from .fast.codes import has_c
from .host.schedule import check_counts
from .kernels import NUMPY_KERNELS
from .plan_cache import Plan, finish
from .safety.header import ALGORITHMS, COLLECTIVES, Header, digest


# ---------------------------------------------------------------- the checks
def header(comm, name: str, xa: Array | None, op=0, count=0, counts=0, root=0) -> list[int]:
    """This call's header fields (the sequence number is stamped per call)."""
    dtype, device = (0, 0) if xa is None else (dtype_code(xa.flat.dtype), int(xa.device))
    return [1, 0, COLLECTIVES[name], op, dtype, count, counts, root, ALGORITHMS[comm.algorithm],
            comm.chunk_bytes, comm.small_bytes, device]


def check_out(comm, out, xa: Array, n: int | None, what: str, offset: int = 0) -> tuple[Array, bool]:
    """(``out`` adapted and checked against ``x`` (n elements; None: x's size), or a new
    array of x's kind; whether the call is in place). The aliasing rule
    (arrays.check_overlap) is checked here."""
    if out is None:
        return xa.kind.empty(xa, n), False
    if out is xa.obj and n is None and (xa.kind is not NUMPY or out.flags.writeable):
        return xa, True  # in place (all_reduce, broadcast): x adapted once serves as out
    if type(out) is np.ndarray and xa.kind is NUMPY and out.dtype is xa.flat.dtype \
            and out.size == (xa.flat.size if n is None else n) and out.flags.c_contiguous and out.flags.writeable:
        # the common case, a host array of the right size and type, in a few checks
        oa = Array(out, out if out.ndim == 1 else out.reshape(-1), NUMPY_KERNELS, False, NUMPY)
        if out.base is None and xa.obj.base is None and out is not xa.obj:
            return oa, False  # two arrays that own their memory share none of it
        return oa, check_overlap(what, xa, oa, comm.rank, offset)
    oa = adapt(out, "out", writable=True)
    want = xa.size if n is None else n
    if oa.flat.dtype != xa.flat.dtype:
        raise TypeError(f"{what}: out has dtype {oa.flat.dtype}, x has {xa.flat.dtype}")
    if oa.size != want:
        raise ValueError(f"{what}: out has {oa.size} elements, expected {want}")
    if oa.device != xa.device:
        raise TypeError(f"{what}: out and x must both be host (numpy, CPU torch) or both device "
                        f"(cupy, CUDA torch) arrays; x is a {xa.kind.name}, out a {oa.kind.name}")
    return oa, check_overlap(what, xa, oa, comm.rank, offset)


def even(comm, piece: int) -> tuple[tuple[int, ...], int]:
    """(counts of an equal split, their digest), remembered per piece size."""
    got = comm.evens.get(piece)
    if got is None:
        if len(comm.evens) >= 64:  # a caller cycling through sizes
            comm.evens.clear()
        counts = (piece,) * comm.size  # a tuple: shared by calls, so never modified
        got = comm.evens[piece] = (counts, digest(counts))
    return got


def all_reduce(comm, key, x, op, out):
    xa = adapt(x, "x")
    code = check_reduction(xa.flat.dtype, op, "all_reduce", comm.rank, xa.device)
    oa, in_place = check_out(comm, out, xa, None, "all_reduce")
    hdr = header(comm, "all_reduce", xa, op=code, count=xa.flat.size)
    return finish(comm, key, "all_reduce", x, out, xa, oa, in_place, hdr, (op,), fresh=out is None), xa, oa


def reduce_scatter(comm, key, x, op, out, counts):
    xa = adapt(x, "x")
    code = check_reduction(xa.flat.dtype, op, "reduce_scatter", comm.rank, xa.device)
    if counts is None:
        if xa.size % comm.size:
            raise ValueError(f"reduce_scatter: x has {xa.size} elements, not divisible by "
                             f"world size {comm.size}; pass counts= for an uneven split")
        counts, fingerprint = even(comm, xa.size // comm.size)
    else:
        counts = check_counts(counts, comm.size, "reduce_scatter")
        if sum(counts) != xa.size:
            raise ValueError(f"reduce_scatter: counts add up to {sum(counts)}, x has {xa.size} elements")
        fingerprint = digest(counts)
    oa, _ = check_out(comm, out, xa, counts[comm.rank], "reduce_scatter")
    hdr = header(comm, "reduce_scatter", xa, op=code, count=xa.size, counts=fingerprint)
    p = finish(comm, key, "reduce_scatter", x, out, xa, oa, False, hdr, (op, counts), counts[comm.rank], out is None)
    return p, xa, oa


def all_gather(comm, key, x, out, counts):
    xa = adapt(x, "x")
    if counts is None:
        counts, fingerprint = even(comm, xa.size)
    else:
        counts = check_counts(counts, comm.size, "all_gather")
        if counts[comm.rank] != xa.size:
            raise ValueError(f"all_gather: counts[{comm.rank}] = {counts[comm.rank]} but x has "
                             f"{xa.size} elements on rank {comm.rank}")
        fingerprint = digest(counts)
    # the header counts the whole output, however the counts were given
    n = sum(counts)
    oa, in_place = check_out(comm, out, xa, n, "all_gather", offset=sum(counts[:comm.rank]))
    hdr = header(comm, "all_gather", xa, count=oa.size, counts=fingerprint)
    return finish(comm, key, "all_gather", x, out, xa, oa, in_place, hdr, (counts,), n, out is None), xa, oa


def broadcast(comm, key, x, root, out):
    xa = adapt(x, "x")
    if not isinstance(root, numbers.Integral) or not 0 <= root < comm.size:
        raise ValueError(f"broadcast: root {root!r} is not a rank of this group (size {comm.size})")
    oa, in_place = check_out(comm, out, xa, None, "broadcast")
    hdr = header(comm, "broadcast", xa, count=xa.size, root=int(root))
    return finish(comm, key, "broadcast", x, out, xa, oa, in_place, hdr, (int(root),), fresh=out is None), xa, oa


def barrier(comm) -> Plan:
    """The barrier's plan (one per communicator: it has no arguments)."""
    p = Plan()
    p.kind, p.hdr, p.in_place, p.n, p.fresh = "barrier", Header(header(comm, "barrier", None)), False, None, False
    p.road, p.run, p.args = route(comm, "barrier", None, None, (), False)
    p.host, p.chunk, p.xa, p.oa, p.program = True, comm.chunk_bytes, None, None, None
    p.in_c, p.rebuilds = p.run in IN_C and bool(comm.tuning.fast) and has_c(), 0
    return p
