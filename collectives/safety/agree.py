"""The safety header: every rank proves it is running the same collective.

Before any received data is used, the ranks all-reduce a small header (sequence
number, collective, op, dtype, counts, root, protocol) by recursive
doubling, keeping the elementwise min and max of every field: exchange with
r^1, r^2, r^4, ...; for a world that is not a power of two p, ranks r >= p
first fold into r - p and get the answer back at the end. Afterwards every
rank holds the same min and max, so every rank reaches the same verdict at
the same point, and no rank is left waiting for data that will never come.
Only on a mismatch do the ranks swap full headers, to name who differs.

A small all-reduce rides along: its payload travels in the same messages and
is reduced at each exchange while the headers still agree, so a small
all-reduce costs log2(N) messages in all, header included. Receives are
posted with room for the largest message any rank may send (the header and
MAX_SMALL_BYTES, the cap on every communicator's ``small_bytes``), so a rank
that took another path, or was built with another ``small_bytes``, still
delivers a header to compare. A message longer than its receive must never
happen: besides MPI's truncation error, Open MPI 5's shared-memory transport
writes a truncated message's excess past the end of the receive buffer.

Cost: ceil(log2 N) (+2 when N is not a power of two) messages of 192 bytes
per collective; a barrier is exactly this exchange. The ring hides it:
``start_agreement`` posts the first round and returns, so the headers travel
while the ring posts its first sends and does its local work (see ring.py,
Context.checked).

The header's fields, the counts digest and the text of a mismatch report
live in header.py; this module is the exchange. A header.Header brings its
packed image, so a call only copies it into the send buffer.
"""
from __future__ import annotations

import functools
import struct

import numpy as np

from ..errors import MismatchError
from .header import HEADER_BYTES, NF, describe
from ..kernels import NUMPY_KERNELS
from ..host.schedule import halving_peers

TAG_AGREE = 11
TAG_DETAIL = 12
MAX_SMALL_BYTES = 256 * 1024  # the largest payload that may ride in a header message, on any rank
# (every communicator keeps a receive buffer this large: 2x the default small_bytes)
_WIRE = struct.Struct(f"={2 * NF}q")  # [header, -header]: one elementwise min keeps min and max


def agree(ctx, header: list[int], payload: np.ndarray | None = None, op: str | None = None,
          source: np.ndarray | None = None) -> None:
    """All-reduce the header's min/max (and ``payload`` with ``op``); raise on mismatch.

    Args:
      ctx: the running collective's Context.
      header: this rank's fields (see FIELDS).
      payload: a small flat host array reduced in place over all ranks, or None.
      op: the payload's reduction op.
      source: where this rank's payload comes from, when not ``payload``
        itself (then ``payload`` is only written: the result).
    """
    for _ in _agreement(ctx, header, payload, op, source, pause=False):
        pass


def start_agreement(ctx, header: list[int]):
    """Post the first round of the header exchange and return at once; exhaust
    the returned iterator (``for _ in it: pass``) for the verdict. Lets the
    ring do local work while the headers are on the wire."""
    it = _agreement(ctx, header, None, None, None, pause=True)
    next(it, None)
    return it


def _agreement(ctx, header, payload, op, source, pause):
    n = ctx.size
    if n == 1:
        if source is not None and source is not payload:
            np.copyto(payload, source)
        return
    pbytes = payload.nbytes if payload is not None else 0
    dtype = payload.dtype if payload is not None else None
    views = ctx.cache.get(_CACHE)
    bufs = views.get((pbytes, dtype)) if views is not None else None
    if bufs is None:
        bufs = _Buffers.get(ctx, pbytes, dtype)
    send, recv, cur, got, mine, theirs = bufs.views
    wire = getattr(header, "wire", None)  # a Header (header.py) carries its packed image
    if wire is not None:
        bufs.image[:] = wire
    else:
        _WIRE.pack_into(send, 0, *header, *[-v for v in header])
    if payload is not None:
        np.copyto(mine, payload if source is None else source)
    tracing = payload is not None and ctx.tracer is not None
    same = True  # every header heard so far equals ours
    folded, plan = bufs.plan
    last, landed = len(plan) - 1, False  # landed: the answer is in payload already
    for i, (peer, step, do_send, do_recv) in enumerate(plan):
        # the small all-reduce's data is traced like the ring's (the header is not)
        where = dict(phase="recursive-doubling", step=step, peer=peer, seg=0, chunk=0, offset=0,
                     count=mine.size) if tracing else None
        hs = [ctx.irecv(recv, peer, TAG_AGREE, where, theirs)] if do_recv else []
        if do_send:
            traced = ctx.trace_step("recursive-doubling", step, peer=peer, seg=0, offset=0) if tracing else None
            hs.append(ctx.isend(send, peer, TAG_AGREE, traced, mine))
        if pause:  # the first round is posted: hand control back until the verdict is wanted
            pause = False
            yield
        ctx.wait(hs, peer=peer, step=step, chunk=0, what="header receive" if do_recv else "header send")
        if do_recv:
            if same and bufs.heard == bufs.said:
                if payload is not None and not folded:  # (a folded rank gets the answer itself)
                    # the last exchange's result goes straight to payload (nothing sends it on);
                    # the lower rank's operand first, on both sides: op(a, b) and op(b, a)
                    # differ in the bits of max(+0, -0) and of NaN payloads
                    landed = i == last
                    dst = payload if landed else mine
                    if peer < ctx.rank:
                        NUMPY_KERNELS.reduce(op, theirs, mine, dst)
                    else:
                        NUMPY_KERNELS.reduce(op, mine, theirs, dst)
            else:  # keep going, so every rank finishes the pattern and hears the verdict
                same = False
                np.minimum(cur, got, out=cur)
    if not same:  # the min and max of some field differ: every rank knows it now
        _report(ctx, np.asarray(header, np.int64))
    if payload is not None and not landed:  # a folded rank: the verdict came back with the answer
        np.copyto(payload, theirs if folded else mine)


_CACHE = "agree"  # ctx.cache[_CACHE]: {(payload bytes, dtype): _Buffers}, at most MAX_CACHED shapes
MAX_CACHED = 32


def agreement_bytes(cache: dict) -> int:
    """Bytes of the buffers that ``cache`` (a communicator's) keeps alive for
    the agreement. They are the communicator's "agree-send"/"agree-recv"
    scratch buffers, which scratch_bytes() counts already: the cached views
    never hold an older, replaced buffer (see _Buffers.get)."""
    views = cache.get(_CACHE) or {}
    bases = {id(b): b for v in views.values() for b in v.bases}
    return sum(b.nbytes for b in bases.values())


class _Buffers:
    """A message: int64 [header, -header] (one elementwise min keeps both the
    min and the negated max), then the payload's bytes. Views built once per
    payload shape, into two scratch buffers shared by every shape."""

    @staticmethod
    def get(ctx, pbytes, dtype) -> "_Buffers":
        """The views for this payload shape, cached. When the send buffer had to
        grow, the views into the old one are dropped with it; past MAX_CACHED
        shapes (a caller cycling through sizes) the cache starts over."""
        views = ctx.cache.setdefault(_CACHE, {})
        bufs = _Buffers(ctx, pbytes, dtype)
        if len(views) >= MAX_CACHED or any(v.bases[0] is not bufs.bases[0] for v in views.values()):
            views.clear()
        views[(pbytes, dtype)] = bufs
        return bufs

    def __init__(self, ctx, pbytes, dtype):
        if pbytes > MAX_SMALL_BYTES:
            raise ValueError(f"a {pbytes}-byte payload cannot ride in a header (at most {MAX_SMALL_BYTES})")
        self.plan = _plan(ctx.rank, ctx.size)  # the exchange's rounds (a communicator's rank and size never change)
        send = ctx.scratch("agree-send", HEADER_BYTES + pbytes, np.uint8, host=True)
        recv = ctx.scratch("agree-recv", HEADER_BYTES + MAX_SMALL_BYTES, np.uint8, host=True)
        self.bases = (send.base if send.base is not None else send, recv.base if recv.base is not None else recv)
        mine = send[HEADER_BYTES:].view(dtype) if dtype is not None else None
        theirs = recv[HEADER_BYTES:HEADER_BYTES + pbytes].view(dtype) if dtype is not None else None
        self.views = (send, recv, send[:HEADER_BYTES].view(np.int64), recv[:HEADER_BYTES].view(np.int64),
                      mine, theirs)
        # the headers as int64 words: one memoryview comparison says whether they agree
        # (as words: a comparison of byte-format views goes byte by byte, 6x slower)
        self.image = memoryview(send[:HEADER_BYTES])  # where a Header's packed image goes
        self.said, self.heard = self.image.cast("q"), memoryview(recv[:HEADER_BYTES]).cast("q")


@functools.lru_cache(maxsize=256)
def _plan(rank: int, world: int):
    """(folded, [(peer, step name, send?, receive?), ...]) for recursive doubling."""
    p, partners = halving_peers(rank, world)
    if rank >= p:  # folded: hand our header in, get the verdict back
        return True, [(rank - p, "agreement fold", True, False), (rank - p, "agreement unfold", False, True)]
    plan = [(rank + p, "agreement fold", False, True)] if rank + p < world else []
    plan += [(q, f"agreement round {i}", True, True) for i, q in enumerate(partners)]
    if rank + p < world:
        plan.append((rank + p, "agreement unfold", True, False))
    return False, plan


def _report(ctx, header: np.ndarray) -> None:
    """Every rank got here: swap full headers to say exactly who differs."""
    n, r = ctx.size, ctx.rank
    all_h = np.empty((n, NF), np.int64)
    all_h[r] = header
    handles = []
    for q in range(n):
        if q != r:
            handles.append(ctx.irecv(all_h[q], q, TAG_DETAIL))
            handles.append(ctx.isend(header, q, TAG_DETAIL))
    ctx.wait(handles, peer=-1, step="mismatch report", chunk=0, what="exchange of headers")
    raise MismatchError(f"rank {r}: ranks disagree on a collective call. " + describe(all_h))
