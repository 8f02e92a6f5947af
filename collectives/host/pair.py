"""The pair road: the ring's collectives when each rank has one peer (two ranks).

With one peer nothing is forwarded, so the chunks that let a ring rank pass
on what it has while the rest arrives buy nothing here, and each costs a
rendezvous and bookkeeping: every piece or segment goes as one message
(roads.choose says when these run; ring.py's block comment explains the header
check, which holds here too: sends may leave before the verdict, receives are
posted only after ``ctx.checked()``). ``tag`` and the limits come from ring.py.
"""
from __future__ import annotations

from .schedule import Range, chunks, split_counts


def all_gather(ctx, x, own, out, offs, tag: int, limit: int) -> None:
    """The all-gather of two ranks: the ring's one step, straight from x into
    the peer's place in out. Chunks exist so a rank can forward what it has
    while the rest arrives; on two ranks nobody forwards, so each piece goes
    as one message (no per-chunk rendezvous), or as messages of at most
    ``limit`` bytes when it is larger. x is copied into its own place last,
    as Open MPI's two-rank all-gather does: copying it first (to overlap the
    header round trip) measured worse from 4 MiB up."""
    r = ctx.rank
    peer = 1 - r
    theirs = out[offs[peer]:offs[peer + 1]]
    if ctx.tracer is None and x.nbytes <= limit and theirs.nbytes <= limit:
        # the common case, with none of the per-chunk bookkeeping below: every
        # microsecond here is added to a copy that MPI's own all-gather makes too
        sends = [ctx.isend(x, peer, tag)] if x.size else []
        ctx.checked()
        if theirs.size:
            ctx.wait([ctx.irecv(theirs, peer, tag)], peer=peer, step=0, chunk=0, what="receive")
        if own is not None:
            ctx.kernels.copy(own, x)
        ctx.wait(sends, peer=peer, step=0, chunk="all", what="send")
        return
    step = max(1, limit // x.itemsize)
    sent = ctx.trace_step("all-gather", 0, peer=peer, seg=r, offset=offs[r])
    sends = [ctx.isend(x[c.slice()], peer, tag, sent) for c in chunks(Range(0, x.size), step)]
    ctx.checked()  # then receive: see "The header check" in ring.py
    rchunks = chunks(Range(0, theirs.size), step)
    recvs = [ctx.irecv(theirs[c.slice()], peer, tag,
                       dict(phase="all-gather", step=0, peer=peer, seg=peer, chunk=i,
                            offset=offs[peer] + c.start, count=c.size) if ctx.tracer is not None else None)
             for i, c in enumerate(rchunks)]
    for i in range(len(rchunks)):
        ctx.wait(recvs[i:i + 1], peer=peer, step=0, chunk=i, what="receive")
    if own is not None:
        ctx.kernels.copy(own, x)
    ctx.wait(sends, peer=peer, step=0, chunk="all", what="send")


def _where(ctx, phase, peer, seg, offset, count):
    """The trace fields of one message (None when not tracing)."""
    if ctx.tracer is None:
        return None
    return dict(phase=phase, step=0, peer=peer, seg=seg, chunk=0, offset=offset, count=count)


def all_reduce(ctx, x, out, offs, op: str, in_place: bool, tag: int, gather_tag: int,
               scratch_bytes: int | None = None) -> None:
    """All-reduce of two ranks, each segment as one message:
    send the peer its segment of x, receive ours, reduce it, send the result back,
    receive the peer's result, with none of the chunk pipeline's per-chunk
    rendezvous and bookkeeping. Out of place, our segment arrives straight in
    ``out`` and is reduced there (op(x, received), the ring's operand order);
    ``in_place`` (out is x's very memory, whatever the objects), it lands in
    scratch, and the peer's result is received into x only once the peer has
    taken our send of that very segment. In place with segments larger than
    ``scratch_bytes``, the vector goes in blocks whose halves fit the scratch, each
    block as above, one after another (both ranks cut the same blocks)."""
    seg = max(offs[1] - offs[0], offs[2] - offs[1]) * x.itemsize
    if in_place and scratch_bytes is not None and seg > scratch_bytes:
        line = max(1, 64 // x.itemsize)  # halves on whole cache lines, as the whole vector's
        half = max(line, scratch_bytes // x.itemsize // line * line)
        for lo in range(offs[0], offs[2], 2 * half):
            a, b = split_counts(min(2 * half, offs[2] - lo), 2, line)
            _all_reduce(ctx, x, out, (lo, lo + a, lo + a + b), op, True, tag, gather_tag)
        return
    _all_reduce(ctx, x, out, offs, op, in_place, tag, gather_tag)


def _all_reduce(ctx, x, out, offs, op, in_place, tag, gather_tag) -> None:
    r = ctx.rank
    peer = 1 - r
    mine, theirs = slice(offs[r], offs[r + 1]), slice(offs[peer], offs[peer + 1])
    dst = out[mine]
    sent = ctx.trace_step("reduce-scatter", 0, peer=peer, seg=peer, offset=offs[peer])
    sends = [ctx.isend(x[theirs], peer, tag, sent)] if offs[peer + 1] > offs[peer] else []
    ctx.checked()  # then receive: see "The header check" in ring.py
    got = ctx.scratch("recv", dst.size, x.dtype) if in_place else dst
    where = _where(ctx, "reduce-scatter", peer, r, offs[r], dst.size)
    first = ctx.irecv(got, peer, tag, where) if dst.size else None
    back = _where(ctx, "all-gather", peer, peer, offs[peer], offs[peer + 1] - offs[peer])
    result = None if in_place or not sends else ctx.irecv(out[theirs], peer, gather_tag, back)
    if first is not None:
        ctx.wait([first], peer=peer, step=0, chunk=0, what="receive")
        ctx.reduce(op, x[mine], got, dst, where)
        step = ctx.trace_step("all-gather", 0, peer=peer, seg=r, offset=offs[r])
        sends.append(ctx.isend(dst, peer, gather_tag, step))
    if in_place and offs[peer + 1] > offs[peer]:
        ctx.wait(sends[:1], peer=peer, step=0, chunk="all", what="send")
        result = ctx.irecv(out[theirs], peer, gather_tag, back)
    if result is not None:
        ctx.wait([result], peer=peer, step=1, chunk=0, what="receive")
    ctx.wait(sends, peer=peer, step=1, chunk="all", what="send")


def reduce_scatter(ctx, x, out, offs, op: str, tag: int) -> None:
    """Reduce-scatter of two ranks: send the peer its segment of x whole, receive
    ours straight into ``out`` (which may not alias x) and reduce it there,
    op(x, received) as the ring does: no scratch at all."""
    r = ctx.rank
    peer = 1 - r
    sent = ctx.trace_step("reduce-scatter", 0, peer=peer, seg=peer, offset=offs[peer])
    sends = [ctx.isend(x[offs[peer]:offs[peer + 1]], peer, tag, sent)] if offs[peer + 1] > offs[peer] else []
    ctx.checked()  # then receive: see "The header check" in ring.py
    if out.size:
        where = _where(ctx, "reduce-scatter", peer, r, offs[r], out.size)
        ctx.wait([ctx.irecv(out, peer, tag, where)], peer=peer, step=0, chunk=0, what="receive")
        ctx.reduce(op, x[offs[r]:offs[r + 1]], out, out, where)
    ctx.wait(sends, peer=peer, step=0, chunk="all", what="send")


def broadcast(ctx, buf, root: int, tag: int) -> None:
    """Broadcast of two ranks: the chain's one hop as one message (the headers
    were checked before: the broadcast posts no receive before its verdict)."""
    peer = 1 - ctx.rank
    if not buf.size:
        return
    if ctx.rank == root:
        sent = ctx.trace_step("broadcast", 0, peer=peer, seg=root, offset=0)
        ctx.wait([ctx.isend(buf, peer, tag, sent)], peer=peer, step=0, chunk="all", what="send")
    else:
        where = _where(ctx, "broadcast", peer, root, 0, buf.size)
        ctx.wait([ctx.irecv(buf, peer, tag, where)], peer=peer, step=0, chunk=0, what="receive")
