"""Per-call plans: what a collective decides from its arguments, made once for
the objects the caller passes and reused while it passes them again.

A call adapts its arrays (arrays.py), checks them (dtype, size, contiguity,
writability, counts, root, op, the aliasing rule), builds its header
(safety/header.py) and asks for its road (dispatch.route, roads.choose). None of that changes while the caller passes the very
same objects, unchanged: a loop over the same gradient buckets, ZeRO's flat
buffers, a benchmark. So ``Communicator`` keeps a :class:`Plan` per
(collective, id(x), id(out), op or root), and a repeated call only checks that
the objects are the plan's own and that nothing its checks depended on changed
in place:

- numpy arrays: shape, dtype and flags (``flags.num``: contiguity and
  writability, so an ``out`` made read-only takes the full path again and is
  refused there). A numpy array's memory cannot move while its shape holds
  (``resize`` changes the shape; ``.data`` cannot be assigned).
- CPU torch tensors: data pointer, shape, dtype and contiguity (``set_``,
  ``resize_`` and ``t.data = ...`` move the first or change the second).

Anything else takes the full path, which makes a new plan. The header
agreement, the deadline and tracing run on every call either way; device
arrays (cupy, CUDA torch) and explicit ``counts`` always take the full path.

Memory: a plan keeps arrays of up to SMALL_BYTES (and heap arrays, which the
heap maps until close anyway) alive through its adapted views, at most
MAX_PLANS plans. Larger arrays are held by weak reference only: a numpy
array is its own view; a CPU tensor's plan keeps a view of its memory that
does not own it, handed back while the tensor lives at the same address (a
view made anew per call missed the direct path's cache of bound views: +17 us
a 256 KiB all-gather through torch, measured on two ranks); and their plan
leaves the cache as soon as either array dies, so a caller cycling through
fresh large buffers keeps none of them alive. Ids cannot be confused: a plan's
arrays are alive while its entry exists (held, or the weak reference's
callback removes the entry as the array dies, before its id can be reused),
and a hit also compares identities.
"""
from __future__ import annotations

import ctypes
import numbers
import weakref

import numpy as np

from .arrays import NUMPY, Array, adapt, check_overlap
from .dispatch import IN_C, route
from .dtypes import check_reduction, dtype_code
from .fast.codes import has_c
from .host.schedule import check_counts
from .kernels import NUMPY_KERNELS
from .safety.header import ALGORITHMS, COLLECTIVES, Header, digest

MAX_PLANS = 32  # plans per communicator; a caller cycling through more starts the cache over
SMALL_BYTES = 64 * 1024  # arrays up to this size are held by their plan (views kept)


class Plan:
    """One call shape: its adapted arrays (or how to remake them), header, runner and arguments.

    Attributes:
      kind: the collective ("all_reduce", ...).
      road: the road roads.choose gave it (a direct road's own is decided per call).
      run: the body that executes it (dispatch.HOST, DIRECT or SYMMETRIC).
      args: the body's trailing arguments (the road, op, counts, root, heap places).
      hdr: the header (safety/header.Header), stamped with each call's sequence number.
      chunk: the ring's chunk in elements (host collectives).
      host: runs on host memory (the communicator's reusable Context).
      in_place: x is out (all_reduce, broadcast) or out's own segment (all_gather).
      in_c: its calls may run as a C program (a cached plan on a direct road).
      program: that program (fast/program.py) once written after a call in Python, else None.
      rebuilds: how often its program was rewritten for peers' new arrays.
    """

    __slots__ = ("kind", "road", "run", "args", "hdr", "chunk", "host", "in_place", "n", "fresh", "xa", "oa",
                 "xref", "oref", "xshape", "xdtype", "xsig", "xnp", "oshape", "odtype", "osig", "onp",
                 "xflat", "oflat", "in_c", "program", "rebuilds")

    def take(self, x, out) -> tuple[Array, Array | None] | None:
        """The adapted (x, out) for this call when ``x`` and ``out`` are this plan's objects,
        unchanged in every way its checks saw; else None (make a new plan)."""
        if not _unchanged(x, self.xref, self.xshape, self.xdtype, self.xsig, self.xnp):
            return None
        if self.oref is not None and not _unchanged(out, self.oref, self.oshape, self.odtype, self.osig, self.onp):
            return None  # (oref None: out is None or x)
        xa, oa = self.xa, self.oa
        if xa is None:  # held weakly: views made again (the checks passed at the plan's making)
            xa = _again(x, self.xflat, "x", False)
            oa = xa if self.in_place and out is x else _again(out, self.oflat, "out", True) \
                if out is not None else None
        if self.fresh:
            oa = xa.kind.empty(xa, self.n)
        return xa, oa


def _unchanged(a, ref, shape, dtype, sig, is_numpy: bool) -> bool:
    """Whether ``a`` is the plan's object (``ref``), unchanged in shape, dtype and, for a
    numpy array, flags (contiguity, writability), for a CPU tensor, data pointer and
    contiguity."""
    if ref() is not a or a.shape != shape or a.dtype is not dtype:
        return False
    if is_numpy:
        return a.flags.num == sig
    return a.data_ptr() == sig and a.is_contiguous()


def _again(t, flat, name: str, writable: bool) -> Array:
    """A weakly held array adapted again; a large CPU tensor gets its plan's ownerless view
    (``flat``) back, the same object every call, so that what is keyed on the view (the
    direct path's bound views, symmetric/direct.py) is found again instead of remade."""
    if flat is None:
        return adapt(t, name, writable=writable)
    return Array(t, flat, NUMPY_KERNELS, False, _TORCH_KIND[0])


def _ownerless(a: Array):
    """A view of a CPU tensor's memory that does not keep the tensor alive (None for numpy
    arrays, whose own object is their view). Used only while the plan's weak reference
    says the tensor lives and its data pointer is unchanged (``Plan.take``), so the memory
    it maps is the tensor's own."""
    if a.kind is NUMPY or a.flat.nbytes == 0:
        return None
    _TORCH_KIND[0] = a.kind
    buf = (ctypes.c_char * a.flat.nbytes).from_address(a.obj.data_ptr())
    return np.frombuffer(buf, dtype=a.flat.dtype)


_TORCH_KIND = [None]  # arrays.py's torch adapter, once a tensor has been planned


def _sig(a):
    """(shape, dtype, flags or data pointer, is numpy) of a host array, or None when
    its kind is not one plans can watch (then the call is not cached)."""
    if type(a) is np.ndarray:
        return a.shape, a.dtype, a.flags.num, True
    mod = type(a).__module__
    if (mod == "torch" or mod.startswith("torch.")) and a.is_cpu:
        return a.shape, a.dtype, a.data_ptr(), False
    return None


def _held(comm, a: Array) -> bool:
    """Whether a plan may keep ``a`` alive: small, or in the symmetric heap."""
    if a.flat.nbytes <= SMALL_BYTES:
        return True
    sym = comm.symmetric
    return sym is not None and type(a.obj) is np.ndarray and sym.heap.locate(a.obj) is not None


def finish(comm, key, kind: str, x, out, xa: Array, oa: Array | None, in_place: bool, hdr: list,
           args: tuple, fresh_n=None, fresh: bool = False) -> Plan:
    """Make the plan of a checked call and, where its objects can be watched, cache it under ``key``."""
    p = Plan()
    p.kind, p.hdr, p.in_place, p.n, p.fresh = kind, Header(hdr), in_place, fresh_n, fresh
    p.road, p.run, p.args = route(comm, kind, xa, oa, args, in_place)
    p.host = oa is None or not oa.device
    chunk = comm.chunk_bytes if p.host else comm.device_chunk_bytes
    p.chunk = chunk if oa is None else max(1, chunk // oa.flat.itemsize)
    p.xa = p.oa = p.xref = p.oref = p.xflat = p.oflat = p.program = None
    p.in_c, p.rebuilds = False, 0
    if key is None or not p.host:
        return p
    xs = _sig(x)
    os_ = None if out is None or out is x else _sig(out)
    if xs is None or (out is not None and out is not x and os_ is None):
        return p
    p.xshape, p.xdtype, p.xsig, p.xnp = xs
    if os_ is not None:
        p.oshape, p.odtype, p.osig, p.onp = os_
    plans = comm.plans
    held = _held(comm, xa) and (fresh or oa is xa or _held(comm, oa))
    try:
        if held:
            p.xa, p.oa = xa, (None if fresh else oa)
            p.xref = weakref.ref(x)
            p.oref = weakref.ref(out) if os_ is not None else None
        else:
            def gone(_, plans=plans, key=key):
                plans.pop(key, None)
            p.xref = weakref.ref(x, gone)
            p.oref = weakref.ref(out, gone) if os_ is not None else None
            p.xflat = _ownerless(xa)
            p.oflat = _ownerless(oa) if os_ is not None and not fresh else None
    except TypeError:  # an object without weak references: not cached
        return p
    if len(plans) >= MAX_PLANS:
        plans.clear()
    plans[key] = p
    p.in_c = p.run in IN_C and not fresh and bool(comm.tuning.fast) and has_c()
    return p


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
