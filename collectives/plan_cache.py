"""The plan cache: what a collective decided from its arguments (plan.py checks
them), reused while the caller passes the same objects, or arrays just like them.

A call adapts its arrays (arrays.py), checks them (dtype, size, contiguity,
writability, counts, root, op, the aliasing rule), builds its header
(safety/header.py) and asks for its road (dispatch.route, roads.choose). None of that changes while the caller passes the very
same objects, unchanged: a loop over the same gradient buckets, ZeRO's flat
buffers, a benchmark. So ``Communicator`` keeps a :class:`Plan` per
(collective, id(x), id(out), op or root), and a repeated call only checks that
the objects are the plan's own and that nothing its checks depended on changed
in place (a hit, below). Nor does any of it change for a new numpy array or CPU
tensor that lies where the last one lay, with its shape, dtype and flags: the
fresh view ``x[:]``, ``x.reshape(...)`` or buffer that real code hands over on
every call (FSDP2's new buffers, a trainer's ``t[:]``).
So the same plan is also kept under the arrays' description (:func:`shape_key`:
address, shape, dtype and flags of x and out, and whether out is x), and a call
whose objects miss the first key takes it from there with new adapted views
(:meth:`Plan.adopt`), a few microseconds instead of the tens the checks and the
road cost again. Those entries hold no array: nothing the plan decided depends
on which object lies at an address, and ``alloc`` (which may put an address
into the heap) forgets them. For the id key:

- numpy arrays: shape, dtype and flags (``flags.num``: contiguity and
  writability, so an ``out`` made read-only takes the full path again and is
  refused there). A numpy array's memory cannot move while its shape holds
  (``resize`` changes the shape; ``.data`` cannot be assigned).
- CPU torch tensors: data pointer, shape, dtype and contiguity (``set_``,
  ``resize_`` and ``t.data = ...`` move the first or change the second).

Anything else takes the full path, which makes a new plan. The header
agreement, the deadline and tracing run on every call either way; device
arrays (cupy, CUDA torch) and explicit ``counts`` always take the full path.

Memory: a plan keeps numpy arrays of up to SMALL_BYTES (and heap arrays, which the
heap maps until close anyway) alive through its adapted views, at most
MAX_PLANS plans under each of the two keys (the oldest goes first). Tensors and larger arrays are held by weak reference only: a numpy
array is its own view; a CPU tensor's plan keeps a view of its memory that
does not own it, handed back while the tensor lives at the same address (a
view made anew per call missed the direct path's cache of bound views: +17 us
a 256 KiB all-gather through torch, measured on two ranks); and their plan
leaves the id key as soon as either array dies (under the arrays' key it
stays, holding none of them), so a caller cycling through fresh large buffers
keeps none of them alive. Ids cannot be confused: a plan's
arrays are alive while its entry exists (held, or the weak reference's
callback removes the entry as the array dies, before its id can be reused),
and a hit also compares identities.
"""
from __future__ import annotations

import ctypes
import weakref

import numpy as np

from .arrays import _TENSOR, NUMPY, Array, adapt
from .dispatch import IN_C, route
from .fast.codes import C, has_c
from .kernels import NUMPY_KERNELS
from .safety.header import Header

MAX_PLANS = 128  # plans per communicator (and shapes); past it the oldest goes (64 gradient buckets in turn
# queued async, which 32 made miss on every call: 50 us a submit where a hit takes 11)
SMALL_BYTES = 64 * 1024  # arrays up to this size are held by their plan (views kept)
_OWNDATA = 4  # numpy's flag for an array that owns its memory: a view of it is alike for a plan


def lookup(comm, key, x, out, arg):
    """(plan, x adapted, out adapted) of a call whose objects are a plan's own (``key``), or
    arrays just like a plan's (shape_key); None when the call must be planned."""
    p = comm.plans.get(key)
    if p is not None:
        got = p.take(x, out)
        if got is not None:
            return p, got[0], got[1]
    sk = shape_key(key[0], x, out, arg)
    p = comm.shapes.get(sk) if sk is not None else None
    if p is None:
        return None
    xa, oa = p.adopt(x, out)
    return p, xa, oa


def shape_key(tag: str, x, out, arg):
    """What a plan decided from, for numpy arrays and CPU torch tensors: (collective, op or
    root, x's and out's address, shape, dtype and flags (numpy) or -1 (a contiguous tensor
    that needs no grad), whether out is x); None for anything else. A tensor's plan holds
    none of its tensors (``_held``): one held by a plan stays alive, and a heap pool's
    block with it (FSDP2's buffers, heap_pool.py), longer on one rank than on its peers."""
    xk = _desc(x)
    if xk is None:
        xk = _tensor_desc(x)
        if xk is None:
            return None
    if out is None or out is x:
        return tag, arg, xk, out is x
    ok = _desc(out)
    if ok is None:
        ok = _tensor_desc(out)
    return None if ok is None else (tag, arg, xk, ok)


def _tensor_desc(t):
    """(data pointer, shape, dtype, -1) of a contiguous CPU torch tensor that needs no grad
    and has no lazy conjugate or negative bit (what arrays.adapt checked or refuses), else None."""
    if type(t) is not _TENSOR[0] or not t.is_cpu or t.requires_grad or not t.is_contiguous() or t.is_conj() \
            or t.is_neg():
        return None
    return t.data_ptr(), t.shape, t.dtype, -1


def _py_desc(a):
    """(address, shape, dtype, flags | OWNDATA) of an exact numpy array, else None."""
    if type(a) is not np.ndarray:
        return None
    return a.__array_interface__["data"][0], a.shape, a.dtype, a.flags.num | _OWNDATA


def _reader():
    """The extension's desc (csrc/fastpath.c: the same tuple from the array's fields, 0.14 us
    where numpy's interface takes 1.2) where it reads a probe as numpy does, else _py_desc."""
    if C is None or not hasattr(C, "desc"):
        return _py_desc
    C.desc_init(np.ndarray)
    probe = np.empty((2, 3), np.float32)[1:]
    return C.desc if C.desc(probe) == _py_desc(probe) and C.desc([probe]) is None else _py_desc


_desc = _reader()


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
        if self.xa is None:  # held weakly: views made again (the checks passed at the plan's making)
            return self.adopt(x, out)
        return self.xa, (self.xa.kind.empty(self.xa, self.n) if self.fresh else self.oa)

    def adopt(self, x, out) -> tuple[Array, Array | None]:
        """(x, out) adapted anew for this plan: its own objects when it holds them weakly, or
        arrays found alike by shape_key (the checks they would pass again are the ones the
        plan's own passed)."""
        xa = _again(x, self.xflat, "x", False)
        if self.fresh:
            return xa, xa.kind.empty(xa, self.n)
        if out is None:
            return xa, None
        return xa, (xa if self.in_place and out is x else _again(out, self.oflat, "out", True))


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
    """Whether a plan may keep ``a`` alive: a numpy array, small or in the symmetric heap.
    Never a tensor: what frees a tensor's memory is its owner's (a heap pool takes a block
    back when its tensor dies), so a plan keeps only a view that does not own it."""
    if type(a.obj) is not np.ndarray:
        return False
    if a.flat.nbytes <= SMALL_BYTES:
        return True
    sym = comm.symmetric
    return sym is not None and sym.heap.locate(a.obj) is not None


def _put(cache: dict, key, p: Plan) -> None:
    """Keep ``p`` under ``key``; at MAX_PLANS the oldest entry goes first."""
    if len(cache) >= MAX_PLANS and key not in cache:
        try:
            del cache[next(iter(cache))]
        except (StopIteration, KeyError, RuntimeError):  # emptied meanwhile by a dying array's callback
            pass
    cache[key] = p


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
    _put(plans, key, p)
    sk = shape_key(key[0], x, out, None if kind == "all_gather" else args[0])
    if sk is not None:
        _put(comm.shapes, sk, p)
    p.in_c = p.run in IN_C and not fresh and bool(comm.tuning.fast) and has_c()
    return p
