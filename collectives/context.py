"""What one running collective needs: transport, kernels, deadline, scratch, trace.

Every message goes through ``Context.isend``/``irecv`` and every wait for a
message through ``Context.wait``, so these also record the trace (see
teach/trace.py): the algorithms only say which step, segment and chunk a
message belongs to. ``Context.wait`` polls the transport against the
collective's deadline (waiting.py's policy), so a peer that never sends turns
into a :class:`CollectiveTimeout` naming this rank, the ranks that never
arrived (safety/census.py), and the peer, step and chunk it waited for.
"""
from __future__ import annotations

import time

from .safety import census

_QUICK_POLLS = 32  # polls before the deadline bookkeeping starts (~10 us of MPI tests)
_LOOK_S = 1e-3  # once not spinning, look this often for a peer's timeout notice


class Context:
    """Per-collective state handed to the algorithms.

    Args:
      transport: moves bytes (MPI or in-process).
      kernels: reduces arrays (numpy or CUDA).
      label: names the collective in errors, e.g. "all_reduce #12".
      timeout: seconds until the deadline.
      chunk: chunk size in elements.
      window: chunks of a reduce-scatter step with a receive posted at once.
      scratch: a callable (name, n, dtype) -> reusable array.
      tracer: optional recorder with ``event(**fields)``.
      cache: a dict that outlives the collective (the communicator's), for
        buffers and views prepared once per shape.
    """

    def __init__(self, transport, kernels, label, timeout, chunk, scratch, tracer=None, cache=None, window=2):
        self.transport, self.kernels, self._label = transport, kernels, label
        self._kind, self._seq = "", 0
        self.rank, self.size = transport.rank, transport.size
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.chunk = chunk
        self.window = max(1, int(window))
        self.scratch = scratch
        self.tracer = tracer
        self.cache = cache if cache is not None else {}  # per-communicator, for prepared views
        self.check = None  # starts the header agreement; see check_start and checked
        self._checking = None
        self.posted = []  # every send and receive this collective posted: see abandon
        self._landing = []  # traced receives not yet waited for: (handle, buffer, trace fields)

    @property
    def label(self) -> str:
        """Names the collective in errors and traces, e.g. "all_reduce #12" (made on
        first use: most calls never need it)."""
        label = self._label
        if label is None:
            label = self._label = f"{self._kind} #{self._seq}"
        return label

    def renew(self, kind: str, seq: int, chunk: int, timeout: float, tracer) -> None:
        """Start the next collective (``kind``, call number ``seq``) on this Context: a
        communicator reuses one for host collectives, since building one per call
        costs more than a small collective's own bookkeeping. A fresh deadline,
        nothing posted, no agreement pending; the communicator's timeout and
        tracer as they are now."""
        self._label, self._kind, self._seq = None, kind, seq
        self.chunk, self.timeout, self.tracer = chunk, timeout, tracer
        self.deadline = time.monotonic() + timeout
        self.check = self._checking = None
        if self.posted:
            self.posted = []
        if self._landing:
            self._landing = []

    def isend(self, buf, peer: int, tag: int, step: dict | None = None, data=None):
        """Post a send through the transport and remember it for ``abandon``.

        Args:
          step: the trace event of the step this message belongs to (from
            ``trace_step``; None when not tracing): the message adds a chunk,
            its elements and its bytes to it.
          data: the part of ``buf`` that is the collective's data, when not all
            of it (the agreement's messages start with the header).
        """
        h = self.transport.isend(buf, peer, tag)
        self.posted.append(h)
        if step is not None:
            d = buf if data is None else data
            step["chunks"] += 1
            step["count"] += d.size
            step["nbytes"] += d.nbytes
        return h

    def irecv(self, buf, peer: int, tag: int, where: dict | None = None, data=None):
        """Post a receive through the transport and remember it for ``abandon``.

        Args:
          where: trace fields of this message (phase, step, peer, seg, chunk,
            offset, count); when tracing, ``wait`` records a ``recv`` event
            with them, and the bytes that landed, once it has completed.
          data: the part of ``buf`` that is the collective's data, as in isend.
        """
        h = self.transport.irecv(buf, peer, tag)
        self.posted.append(h)
        if where is not None and self.tracer is not None:
            self._landing.append((h, buf if data is None else data, where))
        return h

    def trace_step(self, phase: str, step: int, *, peer: int, seg: int, offset: int) -> dict | None:
        """Record the ``send`` event of one step (None when not tracing); pass it
        to ``isend`` with each of the step's chunks. A step whose segment is
        empty keeps an event of 0 chunks and 0 bytes."""
        if self.tracer is None:
            return None
        return self.tracer.event("send", rank=self.rank, label=self.label, phase=phase, step=step, peer=peer,
                                 seg=seg, offset=offset, count=0, chunks=0, nbytes=0)

    def reduce(self, op: str, a, b, out, where: dict | None = None) -> None:
        """out <- op(a, b) with the collective's kernels; traced as a ``reduce`` event with ``where``."""
        self.kernels.reduce(op, a, b, out)
        if where is not None and self.tracer is not None:
            self.tracer.event("reduce", rank=self.rank, label=self.label, nbytes=out.nbytes, data=out, **where)

    def _landed(self, handles) -> None:
        """Trace the receives among ``handles`` (all complete) that carry trace fields."""
        done = {id(h) for h in handles}
        left = []
        for h, buf, where in self._landing:
            if id(h) in done:
                self.tracer.event("recv", rank=self.rank, label=self.label, nbytes=buf.nbytes, data=buf, **where)
            else:
                left.append((h, buf, where))
        self._landing = left

    def abandon(self) -> None:
        """After any error: cancel what this collective still has posted, where
        MPI can, and keep every handle (and so its buffer) alive in the
        transport's ``orphans``: a live request must not be freed, and a peer
        that is only late, not gone, may still send, so its bytes must land in
        memory that still exists, never in a buffer freed after the error. The
        communicator refuses further use, so nothing reads them."""
        if self.posted:
            self.transport.cancel(self.posted)
            keep = getattr(self.transport, "orphans", None)
            if keep is not None:
                keep.extend(self.posted)
            self.posted = []

    def check_start(self) -> None:
        """Post the header agreement's first messages (once; no-op without one)."""
        if self.check is not None:
            start, self.check = self.check, None
            self._checking = start()

    def checked(self) -> None:
        """Finish the header agreement: return once every rank is known to run
        this same collective, or raise MismatchError/CollectiveTimeout.

        The ring posts its first sends, starts the agreement, does local
        work, and only then calls this, before it posts any receive (a
        receive posted before the verdict could match a mismatched peer's
        longer message: see ring.py, "The header check"). On an error, the
        sends already posted are dealt with by ``abandon``, as after any error.
        """
        self.check_start()
        it, self._checking = self._checking, None
        if it is not None:
            for _ in it:
                pass

    def wait(self, handles, *, peer: int, step, chunk, what: str) -> None:
        """Block until every handle completes, or raise at the deadline."""
        t = self.transport
        if t.testall(handles):
            if self._landing:
                self._landed(handles)
            return
        tracer = self.tracer
        if tracer is None:  # a message a few microseconds out: poll without the bookkeeping
            for _ in range(_QUICK_POLLS):
                if t.testall(handles):
                    return
        t0 = time.perf_counter() if tracer is not None else 0.0
        now = time.monotonic()
        pace = t.policy.pacer(now)
        polls = 0
        next_look = now
        while not t.testall(handles):
            polls += 1
            if polls & 255 and pace.spinning(now):
                continue  # spinning: look at the clock every 256 polls only
            now = time.monotonic()
            if now > self.deadline:
                self._fail(handles, peer, step, chunk, what, timed_out=True)
            if pace.spinning(now):
                continue
            if now >= next_look:  # has a peer given up on this communicator? (see census.py)
                next_look = now + _LOOK_S
                if census.heard(t):
                    self._fail(handles, peer, step, chunk, what, timed_out=False)
            pace.pause(now)
        if tracer is not None:
            tracer.event(action="wait", rank=self.rank, label=self.label, what=what, peer=peer,
                         step=step, chunk=chunk, t0=t0, t1=time.perf_counter())
            if self._landing:
                self._landed(handles)

    def _fail(self, handles, peer, step, chunk, what, timed_out: bool):
        """Cancel ``handles``, learn from the other ranks which collective each
        is in (census.py), and raise a CollectiveTimeout naming those that
        never arrived, then what this rank was waiting for."""
        self.transport.cancel(handles)
        incoming = "receive" in what
        detail = f"{what} {'from' if incoming else 'to'} rank {peer} never completed (step {step}, chunk {chunk})"
        ask = incoming and str(step).startswith("agreement")  # "did rank {peer} call this collective?"
        raise census.failure(self, detail, peer, timed_out, ask)
