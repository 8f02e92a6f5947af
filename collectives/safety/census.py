"""After a timeout: which collective every rank is in, so each error names the absent.

A rank that times out knows only the peer it was waiting for, and that peer
is often waiting itself: with rank 2 absent from a 3-rank agreement, rank 0
waits for rank 2 but rank 1 waits for rank 0. So the rank that times out
sends a *notice* (its collective's number and label, and the peer it waited
for) to every other rank, and collects theirs for a grace period. A rank
waiting in any collective of this communicator looks for notices about
every millisecond once it has stopped spinning (``Context.wait``), and then
fails too, sending its own notice. Within the grace period every live rank
has heard from every other that is waiting in a collective; the ranks never
heard from, and those still in an earlier collective, are the ones that
never arrived, and every rank's error names them.

Each rank sends one notice per communicator: after it the communicator is
broken. MPI notices travel on the communicator's private duplicate, so no
other communicator sees them; on the in-process fabric a notice no rank
received stays there, and a new communicator on the same fabric would take
it for its own (tests make a fresh Fabric after a timeout).
"""
from __future__ import annotations

import struct
import time

import numpy as np

from ..errors import CollectiveTimeout

TAG_CENSUS = 13
GRACE_S = 2.0  # at most this long to hear from the others (never more than the timeout)
_MIN_GRACE_S = 0.2
_MSG = struct.Struct("=qqq40s")  # collective number, the peer waited for, 1 = timed out here, label
TIMED_OUT, HEARD = 1, 2


def _host(transport):
    """The host transport (the device transport sends host buffers through it)."""
    return getattr(transport, "host", transport)


def heard(transport) -> bool:
    """Whether some peer's notice is waiting: a peer gave up on this communicator."""
    probe = getattr(_host(transport), "probe", None)
    return probe is not None and probe(TAG_CENSUS)


def _seq(label: str) -> int:
    """The collective's number from its label ("all_reduce #12" -> 12; -1 if none)."""
    try:
        return int(label.rsplit("#", 1)[1])
    except (IndexError, ValueError):
        return -1


def failure(ctx, detail: str, peer: int, timed_out: bool, ask: bool = False) -> CollectiveTimeout:
    """Exchange notices with every rank (up to the grace period) and return the error.

    Args:
      ctx: the failing collective's Context.
      detail: what this rank was waiting for, e.g. "header receive from rank 1 never completed (...)".
      peer: the rank it was waiting for.
      timed_out: this rank reached its deadline (False: it heard a peer's notice first).
      ask: end with "did rank {peer} call this collective?" unless the peer
        said it is in this collective.
    """
    t, n, r = _host(ctx.transport), ctx.size, ctx.rank
    seq = _seq(ctx.label)
    mine = np.frombuffer(_MSG.pack(seq, peer, TIMED_OUT if timed_out else HEARD,
                                   ctx.label.encode()[:40]), np.uint8).copy()
    rows = np.zeros((n, _MSG.size), np.uint8)
    recvs = {q: t.irecv(rows[q], q, TAG_CENSUS) for q in range(n) if q != r}
    sends = [t.isend(mine, q, TAG_CENSUS) for q in range(n) if q != r]
    grace = max(_MIN_GRACE_S, min(GRACE_S, ctx.timeout))
    answers = {r: (seq, peer, TIMED_OUT if timed_out else HEARD, ctx.label)}
    end = time.monotonic() + grace
    while True:
        for q, h in list(recvs.items()):
            if t.test(h):
                s, p, why, label = _MSG.unpack(rows[q].tobytes())
                answers[q] = (s, p, why, label.rstrip(b"\0").decode(errors="replace"))
                del recvs[q]
        if not recvs or time.monotonic() > end:
            break
        time.sleep(1e-3)
    unanswered = list(recvs.values())
    t.cancel(unanswered)
    keep = getattr(t, "orphans", None)
    if keep is not None:  # the notice buffers stay alive with their requests
        keep.extend(unanswered + sends)
        keep.append((rows, mine))
    if ask and answers.get(peer, (None,))[0] != seq:
        detail += f"; did rank {peer} call this collective?"
    return CollectiveTimeout(_message(ctx, answers, grace, detail, timed_out))


def _ranks(qs) -> str:
    qs = sorted(qs)
    return ("rank " if len(qs) == 1 else "ranks ") + ", ".join(map(str, qs))


def _message(ctx, answers: dict, grace: float, detail: str, timed_out: bool) -> str:
    """"rank 1: all_reduce #3 timed out after 5 s: rank 2 never arrived in all_reduce #3 (...). Here: ..."."""
    seq, label = _seq(ctx.label), ctx.label
    first = [q for q, a in answers.items() if a[2] == TIMED_OUT]
    gave_up = "" if timed_out or not first else f" ({_ranks(first)} gave up first)"
    silent = [q for q in range(ctx.size) if q not in answers]
    behind = [q for q, a in answers.items() if a[0] < seq]
    ahead = [q for q, a in answers.items() if a[0] > seq]
    here = [q for q, a in answers.items() if a[0] == seq]
    absent = sorted(silent + behind)
    verdict = f"{_ranks(absent)} never arrived in {label}" if absent else f"every rank is in {label}; none can go on"
    facts = []
    if silent:
        they, are = ("it", "is") if len(silent) == 1 else ("they", "are")
        facts.append(f"no word from {_ranks(silent)} within {grace:g} s: {they} never called {label}, "
                     f"or {are} stuck outside the collectives, or gone")
    facts += [f"rank {q} is still in {answers[q][3]}" for q in sorted(behind)]
    facts += [f"rank {q} is already in {answers[q][3]}" for q in sorted(ahead)]
    facts.append(f"{_ranks(here)} {'is' if len(here) == 1 else 'are'} in {label}")
    return (f"rank {ctx.rank}: {label} timed out after {ctx.timeout:g} s{gave_up}: "
            f"{verdict} ({'; '.join(facts)}). Here: {detail}")
