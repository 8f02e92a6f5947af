"""How a checked call runs: the Communicator's execution half.

plan.py checks the arguments, builds the header and picks the body on the
caller's thread (once per call shape: a repeated call reuses its plan);
everything here runs later, now or queued behind earlier async calls
(work.py): pick the kernels, transport and scratch for the buffers, agree on
the header (agree.py), then run the path chosen for the call (the
small-message road, the ring, a baseline: MPI's or NCCL's own, or the
symmetric heap's direct path).

``_dispatch(plan, ...)`` is the one place a collective enters execution;
``RUNNERS`` maps each collective to its body (``runner`` picks it).
"""
from __future__ import annotations

import numpy as np

from . import ring, small
from .agree import agree, start_agreement
from .arrays import Array
from .context import Context
from .dtypes import is_floating
from .errors import CollectiveError
from .kernels import NUMPY_KERNELS
from .schedule import split_counts
from .transport.device import device_chunk_bytes


class Dispatcher:
    """Execution for Communicator (a mixin: the state is set up in Communicator.__init__)."""

    def _dispatch(self, p, xa: Array | None, oa: Array | None, async_op: bool):
        """Run the call that plan ``p`` (plan.py) describes on adapted, checked buffers:
        now on this thread, or queued behind earlier async calls. Returns the
        caller's ``out`` object, or a Work."""
        seq = self._seq
        self._seq = seq + 1
        if not async_op and p.host:
            # the fast lane: a blocking host call with nothing queued runs here, with no
            # closure, no hand-off, the plan's own header and the one reusable host Context
            engine = self._engine
            if engine.enter_inline(p.kind):
                try:
                    f = p.fast
                    if f and self.tracer is None and self._broken is None:
                        return f.run(self, p, seq, xa, oa)  # its C program (symmetric/fast.py)
                    return self._execute(p, seq, xa, oa, None)
                finally:
                    engine.leave_inline()
        stream = oa.stream if oa is not None else None
        if stream is not None:
            stream.enter()  # after the caller's work on torch's current stream

        def task():
            return self._execute(p, seq, xa, oa, stream)

        label = f"{p.kind} #{seq}"
        if async_op:
            return self._engine.submit(task, label)
        return self._engine.run(task, label)

    def _execute(self, p, seq: int, xa: Array | None, oa: Array | None, stream):
        """Run call number ``seq`` of plan ``p`` (on whichever thread runs it now); return
        the caller's out object. Any error leaves the communicator unusable (``_broken``):
        a collective that failed on one rank may have left messages in flight."""
        if self._broken is not None:
            raise CollectiveError(f"rank {self.rank}: {p.kind} #{seq}: communicator is unusable after an "
                                  f"earlier error: {self._broken}") from self._broken
        if p.host:  # host arrays: everything prepared once
            ctx = self._host_ctx  # one at a time: collectives never run side by side
            ctx.renew(p.kind, seq, p.chunk, self.timeout, self.tracer)
        else:
            kernels, chunk = oa.kernels, max(1, device_chunk_bytes(self.chunk_bytes) // oa.flat.itemsize)
            ctx = Context(self._device(), kernels, f"{p.kind} #{seq}", self.timeout, chunk,
                          self._scratch_for(kernels), self.tracer, self._cache, self.window)
        tracer = ctx.tracer
        try:
            if tracer is not None:
                tracer.begin(ctx.label, rank=self.rank)
            # the plan's header, stamped now: calls run one at a time, so none still uses it
            p.run(self, ctx, p.hdr.stamp(seq), xa, oa, p.in_place, *p.args)
            if tracer is not None:
                tracer.end(ctx.label, rank=self.rank)
            elif p.fast == 0:  # a cached direct-path plan: write its C program now (symmetric/fast.py)
                from .symmetric.fast import build
                p.fast = build(self, p, xa, oa)
        except BaseException as e:
            self._broken = e
            ctx.abandon()
            raise
        if stream is not None:
            stream.leave()  # the caller's later work on its stream waits for ours
        return oa.obj if oa is not None else None

    # ------------------------------------------------------------ bodies
    def _run_all_reduce(self, ctx, hdr, xa: Array, oa: Array, in_place: bool, op: str):
        x, out = xa.flat, oa.flat
        if in_place:
            x = out  # the algorithms test ``out is x``
        op, x, post = self._avg(ctx, op, x, out)
        if self._baseline is not None:
            self._agree(ctx, hdr)
            self._baseline.all_reduce(x, out, op)
        elif out.nbytes <= self.small_bytes:
            small.all_reduce(ctx, hdr, x, out, op)  # header rides along
        else:
            self._ring(ctx, hdr, ring.all_reduce, x, out, split_counts(x.size, self.size, _granule(x)), op)
        if post:
            ctx.kernels.scale(out, self.size)

    def _run_reduce_scatter(self, ctx, hdr, xa: Array, oa: Array, in_place: bool, op: str, counts):
        x, out = xa.flat, oa.flat
        if op == "avg" and is_floating(x.dtype):
            op, x, post = self._avg(ctx, op, x, ctx.scratch("prescale", x.size, x.dtype))
        else:
            op, x, post = self._avg(ctx, op, x, None)
        if self._baseline is not None:
            self._agree(ctx, hdr)
            self._baseline.reduce_scatter(x, out, counts, op)
        elif x.nbytes <= self.small_bytes // 4:
            small.reduce_scatter(ctx, hdr, x, out, counts, op)
        else:
            self._ring(ctx, hdr, ring.reduce_scatter, x, out, counts, op)
        if post:
            ctx.kernels.scale(out, self.size)

    def _avg(self, ctx, op: str, x, into):
        """avg, the one rule for every path and algorithm: floating types are divided
        by N before the sum, as NCCL does, so partial sums stay in range (float16
        would otherwise overflow N times earlier); the quotients go into ``into``
        (out, or scratch when out cannot hold x), never into the caller's x.
        Integers are summed, then divided, truncating toward zero.
        Returns (op to run, its input, whether to divide the result afterwards)."""
        if op != "avg":
            return op, x, False
        if not is_floating(x.dtype):
            return "sum", x, True
        if into is not x:
            ctx.kernels.copy(into, x)
        ctx.kernels.scale(into, self.size)
        return "sum", into, False

    def _run_all_gather(self, ctx, hdr, xa: Array, oa: Array, in_place: bool, counts):
        x, out = xa.flat, oa.flat
        if self._baseline is not None:
            self._agree(ctx, hdr)
            return self._baseline.all_gather(x, out, counts, in_place)
        if out.nbytes <= self.small_bytes // 4:
            return small.all_gather(ctx, hdr, x, out, counts)
        self._ring(ctx, hdr, ring.all_gather, x, out, counts, in_place)

    def _run_broadcast(self, ctx, hdr, xa: Array, oa: Array, in_place: bool, root: int):
        self._agree(ctx, hdr)
        if self.rank == root and not in_place:
            ctx.kernels.copy(oa.flat, xa.flat)
        if self._baseline is not None:
            return self._baseline.broadcast(oa.flat, root)
        ring.broadcast(ctx, oa.flat, root)

    def _run_barrier(self, ctx, hdr, xa, oa, in_place):
        agree(ctx, hdr)

    def _agree(self, ctx, hdr):
        if self.verify:
            agree(ctx, hdr)

    def _ring(self, ctx, hdr, algo, *args):
        """Run a ring collective with its header check inside: the ring posts its
        first sends, then starts and finishes the agreement (Context.checked)
        before it posts a receive, so the header round trip overlaps the sends
        and the local work, and no receive exists before the verdict."""
        if self.verify:
            ctx.check = lambda: start_agreement(ctx, hdr)
        algo(ctx, *args)
        ctx.checked()  # a path that posted nothing (one rank, zero counts) checks here

    # ------------------------------------------------------------ resources
    def _device(self):
        """The transport for device (cupy) buffers: CUDA-aware MPI, CUDA IPC or
        pinned-host staging (see transport/device.py), made on first use."""
        if self._device_transport is None:
            from .transport.device import make_device_transport
            self._device_transport = make_device_transport(self.transport)
        return self._device_transport

    def _scratch_for(self, kernels):
        """scratch(name, n, dtype, host=False): reusable buffers where ``kernels`` computes
        (host=True: always host memory, for headers). Fresh allocations would
        page-fault on every call."""
        def scratch(name, n, dtype, host=False):
            k = NUMPY_KERNELS if host else kernels
            key = (name, np.dtype(dtype).str, k.name, getattr(k, "_device", None))
            buf = self._scratch.get(key)
            if buf is None or buf.size < n:
                buf = k.empty(max(n, 1), dtype)
                self._scratch[key] = buf
            return buf[:n]
        return scratch


def symmetric_takes(sym, kind: str, x: Array | None) -> bool:
    """Whether collective ``kind`` on ``x`` takes the symmetric (direct) path."""
    if x is None:
        return kind == "barrier" and sym.enabled
    return not x.device and sym.takes(x.obj if type(x.obj) is np.ndarray else x.flat)


def _host(a: Array):
    """The numpy array the symmetric path works on: the caller's own (a stable
    identity keys its cached plans), or the flat view of a CPU tensor."""
    return a.obj if type(a.obj) is np.ndarray else a.flat


# The symmetric path (collectives/symmetric): its own header check and signals in
# shared memory; avg accumulates half types in float32 and divides at the end.
SYMMETRIC_RUNNERS = {
    "all_reduce": lambda self, ctx, hdr, xa, oa, in_place, op:
        self._symmetric.all_reduce(ctx, hdr, _host(xa), _host(oa), op),
    "reduce_scatter": lambda self, ctx, hdr, xa, oa, in_place, op, counts:
        self._symmetric.reduce_scatter(ctx, hdr, _host(xa), _host(oa), counts, op),
    "all_gather": lambda self, ctx, hdr, xa, oa, in_place, counts:
        self._symmetric.all_gather(ctx, hdr, _host(xa), _host(oa), counts),
    "broadcast": lambda self, ctx, hdr, xa, oa, in_place, root:
        self._symmetric.broadcast(ctx, hdr, _host(xa), _host(oa), root),
    "barrier": lambda self, ctx, hdr, xa, oa, in_place: self._symmetric.barrier(ctx, hdr),
}

# One node (no hierarchy): straight to the direct algorithms, with the places in the
# heap that the plan found once (xl, ol: an array never moves in the heap; None when
# private), as Symmetric's own methods would pass them.
DIRECT_RUNNERS = {
    "all_reduce": lambda self, ctx, hdr, xa, oa, in_place, op, xl, ol:
        self._symmetric.direct.all_reduce(ctx, hdr, _host(xa), _host(oa), op, xl, ol),
    "reduce_scatter": lambda self, ctx, hdr, xa, oa, in_place, op, counts, xl:
        self._symmetric.direct.reduce_scatter(ctx, hdr, _host(xa), _host(oa), counts, op, xl),
    "all_gather": lambda self, ctx, hdr, xa, oa, in_place, counts, xl, ol:
        self._symmetric.direct.all_gather(ctx, hdr, _host(xa), _host(oa), counts, xl, oloc=ol),
    "broadcast": lambda self, ctx, hdr, xa, oa, in_place, root, xl:
        self._symmetric.direct.broadcast(ctx, hdr, _host(xa), _host(oa), root, xl),
    "barrier": lambda self, ctx, hdr, xa, oa, in_place: self._symmetric.direct.barrier(ctx, hdr),
}


# numpy arrays on both sides (the common case): the caller's own objects, with no _host call
DIRECT_NUMPY_RUNNERS = {
    "all_reduce": lambda self, ctx, hdr, xa, oa, in_place, op, xl, ol:
        self._symmetric.direct.all_reduce(ctx, hdr, xa.obj, oa.obj, op, xl, ol),
    "reduce_scatter": lambda self, ctx, hdr, xa, oa, in_place, op, counts, xl:
        self._symmetric.direct.reduce_scatter(ctx, hdr, xa.obj, oa.obj, counts, op, xl),
    "all_gather": lambda self, ctx, hdr, xa, oa, in_place, counts, xl, ol:
        self._symmetric.direct.all_gather(ctx, hdr, xa.obj, oa.obj, counts, xl, oloc=ol),
    "broadcast": lambda self, ctx, hdr, xa, oa, in_place, root, xl:
        self._symmetric.direct.broadcast(ctx, hdr, xa.obj, oa.obj, root, xl),
}


def runner(sym, kind: str, xa: Array | None, oa: Array | None, args: tuple):
    """(the body that runs collective ``kind`` on these buffers, its trailing arguments)."""
    if sym is None or not symmetric_takes(sym, kind, xa):
        return RUNNERS[kind], args
    if sym.hier is not None:
        return SYMMETRIC_RUNNERS[kind], args
    if xa is None:
        return DIRECT_RUNNERS[kind], args
    loc = sym.heap.locate
    places = (loc(_host(xa)), loc(_host(oa))) if kind in ("all_reduce", "all_gather") else (loc(_host(xa)),)
    # (a fresh out is of x's kind: numpy when x is)
    numpy = type(xa.obj) is np.ndarray and type(oa.obj) is np.ndarray
    return (DIRECT_NUMPY_RUNNERS if numpy else DIRECT_RUNNERS)[kind], args + places


# the bodies whose repeated calls may run as C programs (symmetric/fast.py)
FAST_RUNNERS = frozenset(r[k] for r in (DIRECT_RUNNERS, DIRECT_NUMPY_RUNNERS)
                         for k in ("all_reduce", "reduce_scatter", "all_gather", "barrier") if k in r)

RUNNERS = {"all_reduce": Dispatcher._run_all_reduce, "reduce_scatter": Dispatcher._run_reduce_scatter,
           "all_gather": Dispatcher._run_all_gather, "broadcast": Dispatcher._run_broadcast,
           "barrier": Dispatcher._run_barrier}


def _granule(x) -> int:
    """Segments start on 64-byte boundaries so vector loads stay aligned."""
    return max(1, 64 // x.dtype.itemsize)


def make_baseline(algorithm: str, transport):
    """The registry of other libraries' collectives, imported only when asked for."""
    if algorithm == "mpi":
        from .mpi_algo import MpiAlgorithm
        return MpiAlgorithm(transport.comm)
    if algorithm == "nccl":
        from .nccl_algo import NcclAlgorithm  # a clear error without cupy or NCCL
        return NcclAlgorithm(transport)
    return None
