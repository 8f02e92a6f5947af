"""All-reduce for small messages: recursive doubling, log2(N) exchanges.

The ring needs 2(N-1) steps; for a few kilobytes the per-message latency
dominates, so the whole buffer is exchanged with partners r^1, r^2, r^4, ...
For N not a power of two, the ranks past the largest power of two p first
fold their data into rank r - p and get the result back at the end.

op(a, b) and op(b, a) round identically, so every rank ends with the same bits.
"""
from __future__ import annotations

import numpy as np

from .schedule import halving_peers

TAG_SMALL = 22


def all_reduce(ctx, x: np.ndarray, out: np.ndarray, op: str) -> None:
    n, r, tr, k = ctx.size, ctx.rank, ctx.transport, ctx.kernels
    if out is not x:
        k.copy(out, x)
    if n == 1 or out.size == 0:
        return
    p, partners = halving_peers(r, n)
    tmp = ctx.scratch("small", out.size, out.dtype)
    if r >= p:  # folded rank: hand data to r - p, wait for the answer
        peer = r - p
        h = [tr.isend(out, peer, TAG_SMALL)]
        ctx.wait(h, peer=peer, step="fold", chunk=0, what="send")
        h = [tr.irecv(out, peer, TAG_SMALL)]
        ctx.wait(h, peer=peer, step="unfold", chunk=0, what="receive")
        ctx.record("send", step=0, peer=peer, seg=0, nbytes=out.nbytes)
        ctx.record("recv", step=len(partners) + 1, peer=peer, seg=0, nbytes=out.nbytes)
        return
    extra = r + p if r + p < n else None
    if extra is not None:
        h = [tr.irecv(tmp, extra, TAG_SMALL)]
        ctx.wait(h, peer=extra, step="fold", chunk=0, what="receive")
        k.reduce_(op, out, tmp)
        ctx.record("recv", step=0, peer=extra, seg=0, nbytes=out.nbytes)
    for step, peer in enumerate(partners, start=1):
        rr = tr.irecv(tmp, peer, TAG_SMALL)
        ss = tr.isend(out, peer, TAG_SMALL)
        ctx.wait([rr], peer=peer, step=step, chunk=0, what="receive")
        ctx.wait([ss], peer=peer, step=step, chunk=0, what="send")
        k.reduce_(op, out, tmp)
        ctx.record("send", step=step, peer=peer, seg=0, nbytes=out.nbytes)
        ctx.record("recv", step=step, peer=peer, seg=0, nbytes=out.nbytes)
    if extra is not None:
        h = [tr.isend(out, extra, TAG_SMALL)]
        ctx.wait(h, peer=extra, step="unfold", chunk=0, what="send")
        ctx.record("send", step=len(partners) + 1, peer=extra, seg=0, nbytes=out.nbytes)
