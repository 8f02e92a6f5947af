"""How a checked call runs: the road its plan chose, now or queued.

plan.py checks the arguments, builds the header and asks ``route`` for the
call's road (roads.choose) and the body that runs it, on the caller's thread
(once per call shape: a repeated call reuses its plan). Everything else here
runs later, now or queued behind earlier async calls (work.py): ``dispatch``
is the one place a collective enters execution, ``execute`` runs it (a
Context, the header agreement where the road has one, the body, the trace),
and a repeated direct call with a program runs it in C (fast/program.py).
"""
from __future__ import annotations

import numpy as np

from . import roads
from .context import Context
from .dtypes import is_floating
from .errors import CollectiveError
from .host import run as host, small
from .host.schedule import split_counts
from .roads import Facts, Road
from .safety.agree import agree, start_agreement


def dispatch(comm, p, xa, oa, async_op: bool):
    """Run the call plan ``p`` describes on adapted, checked buffers: now on this
    thread, or queued behind earlier async calls. Returns the caller's out, or a Work."""
    seq = comm.seq
    comm.seq = seq + 1
    comm.last = p
    if not async_op and p.host:
        # the fast lane: a blocking host call with nothing queued runs here, with no
        # closure, no hand-off, the plan's own header and the one reusable host Context
        engine = comm.engine
        if engine.enter_inline(p.kind):
            try:
                prog = p.program
                if prog is not None and comm.broken is None:
                    return prog.run(comm, p, seq, xa, oa)  # its C program (fast/program.py)
                return execute(comm, p, seq, xa, oa, None)
            finally:
                engine.leave_inline()
    stream = oa.stream if oa is not None else None
    if stream is not None:
        stream.enter()  # after the caller's work on torch's current stream

    def task():
        prog = p.program  # read when it runs: the calls before it may have written or dropped it
        if prog is not None and comm.broken is None and stream is None:
            return prog.run(comm, p, seq, xa, oa)  # an async call's C program, as on the fast lane
        return execute(comm, p, seq, xa, oa, stream)

    label = f"{p.kind} #{seq}"
    if async_op:
        return comm.engine.submit(task, label)
    return comm.engine.run(task, label)


def execute(comm, p, seq: int, xa, oa, stream):
    """Run call number ``seq`` of plan ``p`` (on whichever thread runs it now); return
    the caller's out object. Any error leaves the communicator unusable (``broken``):
    a collective that failed on one rank may have left messages in flight."""
    if comm.broken is not None:
        raise CollectiveError(f"rank {comm.rank}: {p.kind} #{seq}: communicator is unusable after an "
                              f"earlier error: {comm.broken}") from comm.broken
    if p.host:  # host arrays: everything prepared once
        ctx = comm.host_ctx  # one at a time: collectives never run side by side
        ctx.renew(p.kind, seq, p.chunk, comm.timeout, comm.tracer)
    else:
        kernels = oa.kernels
        ctx = Context(comm.device_transport(), kernels, f"{p.kind} #{seq}", comm.timeout, p.chunk,
                      comm.scratch_for(kernels), comm.tracer, comm.cache, comm.window)
    tracer = ctx.tracer
    try:
        if tracer is not None:
            tracer.begin(ctx.label, rank=comm.rank)
            mark = tracer.mark()
        # the plan's header, stamped now: calls run one at a time, so none still uses it
        p.run(comm, ctx, p.hdr.stamp(seq), xa, oa, p.in_place, *p.args)
        if tracer is not None:
            tracer.end(ctx.label, rank=comm.rank, road=comm.road_taken().value)
        if p.in_c and p.program is None:  # a repeated direct call: write its C program (fast/program.py)
            from .fast.program import build
            p.program = build(comm, p, xa, oa, tracer.since(mark, comm.rank) if tracer is not None else None)
            p.in_c = p.program is not None
            if p.in_c and comm.lane is not None:  # and let the lane run it from the call's first line
                from .fast.lane import offer
                offer(comm, p, xa, oa)
    except BaseException as e:
        comm.broken = e
        ctx.abandon()
        raise
    if stream is not None:
        stream.leave()  # the caller's later work on its stream waits for ours
    return oa.obj if oa is not None else None


# ------------------------------------------------------------------ roads
def route(comm, kind: str, xa, oa, args: tuple, in_place: bool):
    """(road, the body that runs it, its trailing arguments) for a checked call."""
    sym = comm.symmetric
    direct = sym is not None and (sym.takes(xa.host) if xa is not None and not xa.device
                                  else xa is None and sym.enabled)
    nbytes, piece = _sizes(kind, xa, oa, args, comm.size)
    kring = xa is not None and xa.device and comm.kernel_ring_serves(kind, xa.dtype, args[0] if kind in (
        "all_reduce", "reduce_scatter") else None, nbytes)
    if kind == "all_reduce" and args[0] == "avg" and is_floating(xa.dtype):
        in_place = True  # floating avg scales x into out first (_avg), then reduces out in place
    f = Facts(kind, nbytes, piece, None if xa is None else xa.dtype, args[0] if kind in ("all_reduce",
              "reduce_scatter") else None, comm.size, 1 if sym is None or sym.single_node else
              comm.size // sym.node.size, comm.algorithm, xa is not None and xa.device, kring, direct, in_place)
    road = roads.choose(f, comm.tuning, comm.forced.get(kind)).road
    if road in roads.DIRECT_ROADS or road is Road.HIER:
        return road, *_direct(sym, kind, xa, oa, args)
    if road is Road.CUDA_RING:
        return road, _kernel_ring, (kind,) + args
    return road, HOST[kind], (road,) + args


def _sizes(kind, xa, oa, args, n) -> tuple[int, int]:
    """(the call's bytes, its largest segment or piece in bytes), as roads.Facts has them."""
    if xa is None:
        return 0, 0
    item = xa.dtype.itemsize
    if kind == "all_reduce":
        return xa.flat.nbytes, max(split_counts(xa.size, n, max(1, 64 // item))) * item
    if kind in ("reduce_scatter", "all_gather"):
        counts = args[-1]
        return (xa.flat.nbytes if kind == "reduce_scatter" else oa.flat.nbytes), max(counts) * item
    return xa.flat.nbytes, xa.flat.nbytes


def _direct(sym, kind, xa, oa, args):
    """The direct family's body: through Symmetric (several nodes: hier.py), or straight
    to the Direct with the places in the heap found once (an array never moves there)."""
    if sym.hier is not None or xa is None:
        return SYMMETRIC[kind], args
    loc = sym.heap.locate
    places = (loc(xa.host), loc(oa.host)) if kind in ("all_reduce", "all_gather") else (loc(xa.host),)
    return DIRECT[kind], args + places


# ------------------------------------------------------------ host bodies
def _avg(comm, ctx, op: str, x, into):
    """avg, the one rule for every road and algorithm: floating types are divided
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
    ctx.kernels.scale(into, comm.size)
    return "sum", into, False


def _p2p(comm, ctx, hdr, road, kind, x, out, counts, op, in_place):
    """A point-to-point road with its header check inside: it posts its first sends,
    then starts and finishes the agreement (Context.checked) before it posts a
    receive, so the header round trip overlaps the sends and the local work, and
    no receive exists before the verdict."""
    if comm.verify:
        ctx.check = lambda: start_agreement(ctx, hdr)
    host.run(ctx, Road.RING if road is Road.DEVICE_RING else road, kind, x, out, counts, op, in_place,
             comm.tuning.pair_inplace_bytes)
    ctx.checked()  # a road that posted nothing (one rank, zero counts) checks here


def _all_reduce(comm, ctx, hdr, xa, oa, in_place, road, op):
    x, out = xa.flat, oa.flat
    if in_place:
        x = out  # the algorithms test ``out is x``
    op, x, post = _avg(comm, ctx, op, x, out)
    if road is Road.SMALL:
        small.all_reduce(ctx, hdr, x, out, op)  # header rides along
    elif road is Road.MPI or road is Road.NCCL:
        _agree(comm, ctx, hdr)
        comm.baseline.all_reduce(x, out, op)
    else:
        counts = split_counts(x.size, comm.size, max(1, 64 // x.dtype.itemsize))
        # in place: out is x's memory, also when avg scaled x into out above
        _p2p(comm, ctx, hdr, road, "all_reduce", x, out, counts, op, host.in_place_memory(x, out))
    if post:
        ctx.kernels.scale(out, comm.size)


def _reduce_scatter(comm, ctx, hdr, xa, oa, in_place, road, op, counts):
    x, out = xa.flat, oa.flat
    if op == "avg" and is_floating(x.dtype):
        op, x, post = _avg(comm, ctx, op, x, ctx.scratch("prescale", x.size, x.dtype))
    else:
        op, x, post = _avg(comm, ctx, op, x, None)
    if road is Road.SMALL:
        small.reduce_scatter(ctx, hdr, x, out, counts, op)
    elif road is Road.MPI or road is Road.NCCL:
        _agree(comm, ctx, hdr)
        comm.baseline.reduce_scatter(x, out, counts, op)
    else:
        _p2p(comm, ctx, hdr, road, "reduce_scatter", x, out, counts, op, False)
    if post:
        ctx.kernels.scale(out, comm.size)


def _all_gather(comm, ctx, hdr, xa, oa, in_place, road, counts):
    x, out = xa.flat, oa.flat
    if road is Road.SMALL:
        return small.all_gather(ctx, hdr, x, out, counts)
    if road is Road.MPI or road is Road.NCCL:
        _agree(comm, ctx, hdr)
        return comm.baseline.all_gather(x, out, counts, in_place)
    _p2p(comm, ctx, hdr, road, "all_gather", x, out, counts, None, in_place)


def _broadcast(comm, ctx, hdr, xa, oa, in_place, road, root):
    _agree(comm, ctx, hdr)
    if comm.rank == root and not in_place:
        ctx.kernels.copy(oa.flat, xa.flat)
    if road is Road.MPI or road is Road.NCCL:
        return comm.baseline.broadcast(oa.flat, root)
    host.run(ctx, Road.RING if road is Road.DEVICE_RING else road, "broadcast", oa.flat, oa.flat, root)


def _barrier(comm, ctx, hdr, xa, oa, in_place, road):
    agree(ctx, hdr)


def _kernel_ring(comm, ctx, hdr, xa, oa, in_place, kind, *args):
    """The cuda-ring road: the header agreed on the host, then one launch (collectives/gpu_ring)."""
    _agree(comm, ctx, hdr)
    x, out = xa.flat, oa.flat
    n = comm.size
    if kind == "all_gather":
        op, counts = None, list(args[0])
    else:
        op = args[0]
        counts = split_counts(x.size, n, max(1, 64 // x.dtype.itemsize)) if kind == "all_reduce" else list(args[1])
        if in_place:
            x = out
        op, x, post = _avg(comm, ctx, op, x, out if kind == "all_reduce" else ctx.scratch("prescale", x.size,
                                                                                          x.dtype))
    ctx.kernels.xp.cuda.Device().synchronize()  # the caller's work on any stream before the launch
    comm.kernel_ring().run(kind, [x.data.ptr], [out.data.ptr], counts, x.dtype, op)
    if kind != "all_gather" and post:
        ctx.kernels.scale(out, n)


def _agree(comm, ctx, hdr):
    if comm.verify:
        agree(ctx, hdr)


HOST = {"all_reduce": _all_reduce, "reduce_scatter": _reduce_scatter, "all_gather": _all_gather,
        "broadcast": _broadcast, "barrier": _barrier}

# The direct roads (collectives/symmetric): their own header check and signals in shared
# memory; avg accumulates half types in float32 and divides at the end.
SYMMETRIC = {
    "all_reduce": lambda comm, ctx, hdr, xa, oa, in_place, op:
        comm.symmetric.all_reduce(ctx, hdr, xa.host, oa.host, op),
    "reduce_scatter": lambda comm, ctx, hdr, xa, oa, in_place, op, counts:
        comm.symmetric.reduce_scatter(ctx, hdr, xa.host, oa.host, counts, op),
    "all_gather": lambda comm, ctx, hdr, xa, oa, in_place, counts:
        comm.symmetric.all_gather(ctx, hdr, xa.host, oa.host, counts),
    "broadcast": lambda comm, ctx, hdr, xa, oa, in_place, root:
        comm.symmetric.broadcast(ctx, hdr, xa.host, oa.host, root),
    "barrier": lambda comm, ctx, hdr, xa, oa, in_place: comm.symmetric.barrier(ctx, hdr),
}

# One node: straight to the Direct, with the places in the heap the plan found once
# (xl, ol; None when private), as Symmetric's own methods would pass them.
DIRECT = {
    "all_reduce": lambda comm, ctx, hdr, xa, oa, in_place, op, xl, ol:
        comm.symmetric.direct.all_reduce(ctx, hdr, xa.host, oa.host, op, xl, ol),
    "reduce_scatter": lambda comm, ctx, hdr, xa, oa, in_place, op, counts, xl:
        comm.symmetric.direct.reduce_scatter(ctx, hdr, xa.host, oa.host, counts, op, xl),
    "all_gather": lambda comm, ctx, hdr, xa, oa, in_place, counts, xl, ol:
        comm.symmetric.direct.all_gather(ctx, hdr, xa.host, oa.host, counts, xl, oloc=ol),
    "broadcast": lambda comm, ctx, hdr, xa, oa, in_place, root, xl:
        comm.symmetric.direct.broadcast(ctx, hdr, xa.host, oa.host, root, xl),
}
IN_C = frozenset(DIRECT[k] for k in ("all_reduce", "reduce_scatter", "all_gather", "broadcast")) | {SYMMETRIC["barrier"]}


def host_array(x) -> bool:
    """Whether ``x`` is an ordinary numpy array (what the direct roads take as it is)."""
    return type(x) is np.ndarray
