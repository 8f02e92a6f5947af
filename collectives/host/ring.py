"""The ring road: chunked, pipelined reduce-scatter, all-gather and all-reduce, and a broadcast chain.

The executor only moves bytes and calls kernels; *which* segment goes where
at each step comes from :mod:`collectives.schedule` (read its docstring for
the picture of segments and chunks).

Pipelining. Within a reduce-scatter step, ``window`` chunks (2 by default)
have a receive posted, each into its own chunk-sized slot; chunk k is
reduced as soon as it lands, its slot takes the receive of chunk k + window,
and the reduced chunk is sent on to the right neighbour at once (it is the
next step's input). So the link never idles for a whole segment, and the
reduce reads data that has just arrived into a slot still in cache (posting
every chunk at once let MPI copy a whole segment in one progress call,
past the cache, before the first reduce). The
all-gather posts every receive of every step up front, each into its final
place in the output, and forwards each chunk the moment it arrives. In an
all-reduce, each chunk of a rank's own segment starts its all-gather the
moment the last reduce-scatter step makes it final (on a tag of its own, so
it cannot be taken for reduce-scatter data): the right neighbour pulls it
while this rank is still reducing the next chunk.

The header check. Each collective's first sends are posted before the
header agreement finishes (``ctx.checked``), and its receives only after:
a receive posted before the verdict could match a mismatched peer's longer
message, and Open MPI 5's shared-memory transport writes the excess of a
truncated message past the end of the receive buffer (measured: a
mismatched two-rank all-gather wrote 8 KiB past the user's ``out``). The
early sends cost nothing: MPI moves a large message only once its receive
is posted, and posting receives early measured no faster (1 MiB, two ranks,
alternating in one launch). On two ranks of host memory, roads.choose sends
calls by the pair road instead (pair.py: each segment as one message).

Buffers. Reduce-scatter keeps partial results in two scratch segments used
in turn (the one sent at step t + 1 is the one reduced at step t), and the
last step reduces straight into ``out``. All-reduce needs no such scratch:
each segment's partial lives in its own place in ``out``, since every
segment is reduced at most once per rank. ``x`` is only ever read, so
``out=x`` (in place) and ``out=None`` (a new array) take the same path.
"""
from __future__ import annotations

import numpy as np

from ..roads import MAX_MESSAGE_BYTES
from .schedule import Range, all_gather_step, chunks, offsets, reduce_scatter_step

TAG_DATA = 21
TAG_GATHER = 23  # all-reduce's all-gather half: its first chunks leave during the reduce-scatter


def _seg(offs: list[int], s: int) -> slice:
    return slice(offs[s], offs[s + 1])


def _reduce_phase(ctx, x: np.ndarray, counts: list[int], op: str, dest, on_final=None) -> None:
    """Ring reduce-scatter steps 0 .. N-2; ``dest(step, seg)`` is where a partial lands.
    ``on_final(view)`` sees each chunk of this rank's own segment as soon as it is final."""
    n, r = ctx.size, ctx.rank
    tracing = ctx.tracer is not None
    right, left = (r + 1) % n, (r - 1) % n
    offs = offsets(counts)
    w = ctx.window  # chunks in flight; their receive slots stay in cache
    slots = ctx.scratch("recv", w * ctx.chunk, x.dtype)

    send_seg, _ = reduce_scatter_step(r, n, 0)
    src = x[_seg(offs, send_seg)]
    step = ctx.trace_step("reduce-scatter", 0, peer=right, seg=send_seg, offset=offs[send_seg])
    sends = [ctx.isend(src[c.slice()], right, TAG_DATA, step) for c in chunks(Range(0, counts[send_seg]), ctx.chunk)]
    for t in range(n - 1):
        send_seg, recv_seg = reduce_scatter_step(r, n, t)
        rchunks = chunks(Range(0, counts[recv_seg]), ctx.chunk)
        slot = [slots[(i % w) * ctx.chunk:(i % w) * ctx.chunk + c.size] for i, c in enumerate(rchunks)]
        where = [dict(phase="reduce-scatter", step=t, peer=left, seg=recv_seg, chunk=i,
                      offset=offs[recv_seg] + c.start, count=c.size) if tracing else None
                 for i, c in enumerate(rchunks)]
        if t == 0:  # receive nothing before every rank is known to run this same collective
            ctx.checked()
        rreqs = [ctx.irecv(slot[i], left, TAG_DATA, where[i]) for i in range(min(w, len(rchunks)))]
        mine = x[_seg(offs, recv_seg)]
        dst = dest(t, recv_seg)
        forward = t + 1 < n - 1  # what we reduce now is sent at the next step
        step = ctx.trace_step("reduce-scatter", t + 1, peer=right, seg=recv_seg, offset=offs[recv_seg]) \
            if forward else None
        next_sends = []
        for i, c in enumerate(rchunks):
            ctx.wait([rreqs[i]], peer=left, step=t, chunk=i, what="receive")
            s = c.slice()
            ctx.reduce(op, mine[s], slot[i], dst[s], where[i])
            if i + w < len(rchunks):  # the slot is free again: post the receive w chunks ahead
                rreqs.append(ctx.irecv(slot[i + w], left, TAG_DATA, where[i + w]))
            if forward:
                next_sends.append(ctx.isend(dst[s], right, TAG_DATA, step))
            elif on_final is not None:
                on_final(dst[s])
        ctx.wait(sends, peer=right, step=t, chunk="all", what="send")
        sends = next_sends


def _gather_phase(ctx, buf: np.ndarray, counts: list[int], own=None, sent=None, tag=TAG_DATA) -> None:
    """Ring all-gather steps in place: ``buf`` holds this rank's segment already,
    or it is in ``own`` (then copied into ``buf`` while the first step is on the wire).
    ``sent``: handles of the first step's sends, when the caller posted them early."""
    n, r = ctx.size, ctx.rank
    tracing = ctx.tracer is not None
    right, left = (r + 1) % n, (r - 1) % n
    offs = offsets(counts)
    chunk = ctx.chunk
    mine = buf[_seg(offs, r)]
    src = mine if own is None else own
    if sent is None:
        step = ctx.trace_step("all-gather", 0, peer=right, seg=r, offset=offs[r])
        sends = [ctx.isend(src[c.slice()], right, tag, step) for c in chunks(Range(0, counts[r]), chunk)]
    else:
        sends = list(sent)
    ctx.check_start()  # (all_gather) headers go out with the data, and travel while we copy
    if own is not None:
        ctx.kernels.copy(mine, own)
    ctx.checked()
    steps = []  # per step: (its segment's view, chunks, receive handles, next step's send event), all posted now
    for t in range(n - 1):
        _, recv_seg = all_gather_step(r, n, t)
        view = buf[_seg(offs, recv_seg)]
        rchunks = chunks(Range(0, counts[recv_seg]), chunk)
        rreqs = [ctx.irecv(view[c.slice()], left, tag,
                           dict(phase="all-gather", step=t, peer=left, seg=recv_seg, chunk=i,
                                offset=offs[recv_seg] + c.start, count=c.size) if tracing else None)
                 for i, c in enumerate(rchunks)]
        forward = t + 1 < n - 1
        nxt = ctx.trace_step("all-gather", t + 1, peer=right, seg=recv_seg, offset=offs[recv_seg]) \
            if forward else None
        steps.append((view, rchunks, rreqs, forward, nxt))
    for t, (view, rchunks, rreqs, forward, nxt) in enumerate(steps):
        for i, c in enumerate(rchunks):
            ctx.wait([rreqs[i]], peer=left, step=t, chunk=i, what="receive")
            if forward:
                sends.append(ctx.isend(view[c.slice()], right, tag, nxt))
    ctx.wait(sends, peer=right, step=n - 2, chunk="all", what="send")


def reduce_scatter(ctx, x: np.ndarray, out: np.ndarray, counts: list[int], op: str) -> None:
    """out <- segment ``rank`` of the reduction of every rank's ``x``.

    Args:
      x: flat input, len(x) == sum(counts).
      out: flat output of counts[rank] elements; may not alias x.
      counts: elements per segment, one per rank.
      op: sum, prod, max or min.
    """
    n = ctx.size
    offs = offsets(counts)
    if n == 1:
        ctx.kernels.copy(out, x[_seg(offs, 0)])
        return
    big = max(counts)
    acc = (ctx.scratch("acc0", big, x.dtype), ctx.scratch("acc1", big, x.dtype))

    def dest(t, seg):
        return out if t == n - 2 else acc[t % 2][: counts[seg]]

    _reduce_phase(ctx, x, counts, op, dest)


def all_gather(ctx, x: np.ndarray, out: np.ndarray, counts: list[int], in_place: bool = False) -> None:
    """out <- every rank's ``x`` in rank order (x has counts[rank] elements).

    ``in_place``: ``x`` is exactly this rank's own segment of ``out``, as
    arrays.check_overlap (the one aliasing rule) found; otherwise they are apart.
    """
    offs = offsets(counts)
    own = out[_seg(offs, ctx.rank)]
    separate = own.size and not in_place
    if ctx.size == 1:
        if separate:
            ctx.kernels.copy(own, x)
        return
    # send straight from x (as MPI does) and copy it into out while it is on the wire
    _gather_phase(ctx, out, counts, own=x if separate else None)


def all_reduce(ctx, x: np.ndarray, out: np.ndarray, counts: list[int], op: str) -> None:
    """out <- reduction of every rank's ``x``: reduce-scatter, then all-gather.

    ``counts`` is how the buffer is split into segments (see split_counts).
    ``out`` may be ``x`` itself.
    """
    n = ctx.size
    if n == 1:
        if out is not x:
            ctx.kernels.copy(out, x)
        return
    offs = offsets(counts)
    right = (ctx.rank + 1) % n
    early = []  # our own segment's chunks go out the moment they are final
    gather0 = ctx.trace_step("all-gather", 0, peer=right, seg=ctx.rank, offset=offs[ctx.rank])

    def send_final(view):
        early.append(ctx.isend(view, right, TAG_GATHER, gather0))

    _reduce_phase(ctx, x, counts, op, lambda t, seg: out[_seg(offs, seg)], on_final=send_final)
    _gather_phase(ctx, out, counts, sent=early, tag=TAG_GATHER)


def broadcast(ctx, buf: np.ndarray, root: int) -> None:
    """Pipelined chain from ``root`` around the ring; ``buf`` is in and out."""
    n, r = ctx.size, ctx.rank
    tracing = ctx.tracer is not None
    if n == 1:
        return
    right, left = (r + 1) % n, (r - 1) % n
    hop = (r - root) % n  # 0 at the root, n-1 at the end of the chain
    cs = chunks(Range(0, buf.size), ctx.chunk)
    if hop == 0:
        step = ctx.trace_step("broadcast", 0, peer=right, seg=root, offset=0)
        sends = [ctx.isend(buf[c.slice()], right, TAG_DATA, step) for c in cs]
        ctx.wait(sends, peer=right, step=0, chunk="all", what="send")
        return
    rreqs = [ctx.irecv(buf[c.slice()], left, TAG_DATA,
                       dict(phase="broadcast", step=hop - 1, peer=left, seg=root, chunk=i, offset=c.start,
                            count=c.size) if tracing else None)
             for i, c in enumerate(cs)]
    forward = hop < n - 1
    step = ctx.trace_step("broadcast", hop, peer=right, seg=root, offset=0) if forward else None
    sends = []
    for i, c in enumerate(cs):
        ctx.wait([rreqs[i]], peer=left, step=hop - 1, chunk=i, what="receive")
        if forward:
            sends.append(ctx.isend(buf[c.slice()], right, TAG_DATA, step))
    if forward:
        ctx.wait(sends, peer=right, step=hop, chunk="all", what="send")
