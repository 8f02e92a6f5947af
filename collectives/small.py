"""All-reduce for small messages: the payload rides in the header exchange.

The ring needs 2(N-1) steps; for a few kilobytes the per-message latency
dominates. So a small all-reduce is the header agreement of agree.py with
the data attached: recursive doubling over r^1, r^2, r^4, ..., one message
per round carrying header and payload together. For N not a power of two,
ranks past the largest power of two p fold into r - p first and get the
result back at the end. op(a, b) and op(b, a) round identically, so every
rank ends with the same bits.
"""
from __future__ import annotations

import numpy as np

from .agree import agree


def all_reduce(ctx, header: list[int], x: np.ndarray, out: np.ndarray, op: str, capacity: int) -> None:
    """out <- op-reduction of every rank's x (x.nbytes <= capacity on every rank).

    Device arrays take a trip through host memory: for a few kilobytes the
    copies cost less than a kernel launch per round.
    """
    if ctx.kernels.device:
        host = ctx.kernels.xp.asnumpy(x)
        agree(ctx, header, payload=host, op=op, capacity=capacity)
        out.set(host)
        return
    if out is not x:
        ctx.kernels.copy(out, x)
    agree(ctx, header, payload=out, op=op, capacity=capacity)
