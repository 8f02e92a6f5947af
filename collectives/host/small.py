"""Small messages: the data rides in the header exchange of agree.py.

The ring needs 2(N-1) steps; for a few kilobytes the per-message latency
dominates. So a small all-reduce is the header agreement with the data
attached: recursive doubling over r^1, r^2, r^4, ..., one message per round
carrying header and payload together. For N not a power of two, ranks past
the largest power of two p fold into r - p first and get the result back at
the end. Both sides of an exchange compute op(lower rank's operand, higher
rank's operand): op(a, b) and op(b, a) round identically, but max(+0, -0) and
NaN payloads keep the bits of the first operand, and every rank must end with
the same bits.

Small reduce-scatters and all-gathers take the same road, spending bytes to
save steps (worth it below ``small_bytes / 4``): a reduce-scatter all-reduces the
whole buffer and keeps its segment; an all-gather all-reduces a buffer that
holds each rank's piece in its place and zeros elsewhere, with ``max`` over
the raw bytes, which returns every byte exactly (no float arithmetic, so
-0.0 and NaN payloads survive).

Device arrays take a trip through host memory: for a few kilobytes the
copies cost less than a kernel launch per round.
"""
from __future__ import annotations

import numpy as np

from ..safety.agree import agree


def _to_host(ctx, x: np.ndarray) -> np.ndarray:
    """A host copy of ``x`` that the exchange may overwrite."""
    return ctx.kernels.xp.asnumpy(x) if ctx.kernels.device else x.copy()


def _from_host(ctx, out, host: np.ndarray) -> None:
    if ctx.kernels.device:
        out.set(host)
    else:
        ctx.kernels.copy(out, host)


def all_reduce(ctx, header: list[int], x: np.ndarray, out: np.ndarray, op: str) -> None:
    """out <- op-reduction of every rank's x (x.nbytes <= MAX_SMALL_BYTES)."""
    if ctx.kernels.device:
        host = _to_host(ctx, x)
        agree(ctx, header, payload=host, op=op)
        _from_host(ctx, out, host)
        return
    agree(ctx, header, payload=out, op=op, source=x)


def reduce_scatter(ctx, header: list[int], x, out, counts: list[int], op: str) -> None:
    """out <- segment ``rank`` of the reduction (x.nbytes <= MAX_SMALL_BYTES)."""
    if ctx.kernels.device:
        full = _to_host(ctx, x)
        agree(ctx, header, payload=full, op=op)
    else:  # the exchange reads x and writes the sum into reusable scratch: no copy, no allocation
        full = ctx.scratch("small-full", x.size, x.dtype)
        agree(ctx, header, payload=full, op=op, source=x)
    lo = sum(counts[:ctx.rank])
    _from_host(ctx, out, full[lo:lo + counts[ctx.rank]])


def all_gather(ctx, header: list[int], x, out, counts: list[int]) -> None:
    """out <- every rank's piece in rank order (out.nbytes <= MAX_SMALL_BYTES)."""
    item = out.dtype.itemsize
    lo = sum(counts[:ctx.rank]) * item
    if not ctx.kernels.device:  # lay the pieces out in ``out`` itself: no scratch, one copy less
        full = out.view(np.uint8)
        full[:lo] = 0
        full[lo + x.nbytes:] = 0
        np.copyto(full[lo:lo + x.nbytes], x.view(np.uint8))  # in place (x is that segment): a no-op copy
        agree(ctx, header, payload=full, op="max")
        return
    full = ctx.scratch("small-gather", out.nbytes, np.uint8, host=True)
    full[:lo] = 0
    full[lo + x.nbytes:] = 0
    full[lo:lo + x.nbytes] = _to_host(ctx, x).view(np.uint8) if ctx.kernels.device else x.view(np.uint8)
    agree(ctx, header, payload=full, op="max")
    _from_host(ctx, out, full.view(out.dtype))
