"""Show, step by step, how the ring moves bytes: ``python -m collectives.explain``.

    python -m collectives.explain all_reduce --ranks 4 --count 16
    python -m collectives.explain reduce_scatter --ranks 3 --count 10 --chunk 2
    python -m collectives.explain all_reduce --ranks 4 --count 16 --svg ring.svg

The real ring algorithms (ring.py) run on simulated
ranks: one thread per rank over the in-process transport, with a
:class:`~collectives.trace.Tracer` that keeps a copy of every chunk that
lands. Nothing here re-implements the schedule: every line printed comes from
a recorded send, receive or reduce.

Rank r starts with 10**r in every element, so in a sum each decimal digit
says whose data is in it: 1011 holds ranks 0, 1 and 3 (N <= 8).

Segments. Explain cuts the buffer like ``split_counts(count, N)`` (as even as
possible, element by element) or as ``--counts`` says. The Communicator's own
all-reduce aligns segments to 64 bytes, which for a 16-element buffer would
put everything in segment 0; explain calls the ring functions directly so
that small examples show the textbook split.

Byte formulas checked at the end (stated once, in collectives/volumes.py;
B = whole buffer, s_i = segment i in bytes, every index mod N):
  reduce-scatter: rank r sends B - s_r, receives B - s_(r-1)
  all-gather:     rank r sends B - s_(r+1), receives B - s_r
  all-reduce:     the sum of both (2(N-1)/N B for an even split)
  broadcast:      every rank sends B except the end of the chain (root - 1);
                  every rank but the root receives B
Steps: N-1 for reduce-scatter, all-gather and broadcast; 2(N-1) for all-reduce.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from . import ring
from .context import Context
from .kernels import kernels_for
from .schedule import offsets, split_counts
from .simulate import simulate
from .trace import Tracer
from .volumes import even_bytes_sent, ring_volumes

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
DTYPES = ("float32", "float64", "int32", "int64")
PHASE_NAMES = {"reduce-scatter": "reduce-scatter", "all-gather": "all-gather",
               "broadcast": "broadcast"}


@dataclass
class Step:
    """One step of the run, over every rank: what was sent, what landed, buffers after."""

    index: int
    phase: str
    phase_step: int
    sends: list = field(default_factory=list)    # send events
    lands: list = field(default_factory=list)    # recv/reduce events grouped: dicts
    views: list = field(default_factory=list)    # per rank, float64 buffer after the step (NaN: unknown)


@dataclass
class Run:
    op: str
    world: int
    counts: list
    dtype: np.dtype
    chunk: int
    root: int
    tracer: Tracer
    inputs: list
    outputs: list
    initial: list
    steps: list = field(default_factory=list)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return sum(self.counts) * self.itemsize

    @property
    def digits(self) -> bool:
        """Inputs are 10**rank, and sums stay exact: digits name the ranks summed in."""
        return self.world <= 8


def rank_value(rank: int, world: int) -> int:
    return 10 ** rank if world <= 8 else rank + 1


def run(op: str, world: int, count: int, *, dtype: str = "float32", chunk: int | None = None,
        root: int = 0, counts: list[int] | None = None) -> Run:
    """Run one collective on ``world`` simulated ranks with a tracer; return what happened.

    Args:
      op: all_reduce, reduce_scatter, all_gather or broadcast.
      world: number of simulated ranks.
      count: elements in the whole buffer (ignored when ``counts`` is given).
      dtype: element type (float32, float64, int32, int64).
      chunk: chunk size in elements (default: a whole segment per chunk).
      root: broadcast root.
      counts: elements per segment (uneven and empty allowed).
    """
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")
    if world < 1 or not 0 <= root < world:
        raise ValueError(f"bad world={world} or root={root}")
    if counts is None:
        counts = split_counts(count, world)
    counts = [int(c) for c in counts]
    if len(counts) != world or min(counts) < 0:
        raise ValueError(f"counts must be {world} numbers >= 0, got {counts}")
    dt = np.dtype(dtype)
    n = sum(counts)
    chunk = int(chunk) if chunk else max(max(counts), 1)
    offs = offsets(counts)
    tracer = Tracer(keep_data=True)
    label = f"{op} #0"

    def make_input(r):
        size = counts[r] if op == "all_gather" else n
        return np.full(size, rank_value(r, world), dtype=dt)

    inputs = [make_input(r) for r in range(world)]
    outputs: list = [None] * world

    def body(comm):
        r = comm.rank
        x = inputs[r]
        scratch_bufs: dict = {}

        def scratch(name, size, sdt):
            key = (name, np.dtype(sdt).str)
            if key not in scratch_bufs or scratch_bufs[key].size < size:
                scratch_bufs[key] = np.empty(max(size, 1), sdt)
            return scratch_bufs[key][:size]

        ctx = Context(comm.transport, kernels_for(x), label, 30.0, chunk, scratch, tracer)
        tracer.begin(label, rank=r)
        if op == "all_reduce":
            out = np.empty_like(x)
            ring.all_reduce(ctx, x, out, counts, "sum")
        elif op == "reduce_scatter":
            out = np.empty(counts[r], dt)
            ring.reduce_scatter(ctx, x, out, counts, "sum")
        elif op == "all_gather":
            out = np.empty(n, dt)
            ring.all_gather(ctx, x, out, counts)
        else:
            out = x.copy()
            ring.broadcast(ctx, out, root)
        tracer.end(label, rank=r)
        outputs[r] = out

    simulate(world, body, timeout=30.0)
    initial = []
    for r in range(world):
        v = np.full(n, np.nan)
        if op == "all_gather":
            v[offs[r]:offs[r + 1]] = inputs[r]
        else:
            v[:] = inputs[r]
        initial.append(v)
    result = Run(op, world, counts, dt, chunk, root, tracer, inputs, outputs, initial)
    result.steps = _steps(result)
    return result


def _phase_order(run: Run) -> list[str]:
    return {"all_reduce": ["reduce-scatter", "all-gather"], "reduce_scatter": ["reduce-scatter"],
            "all_gather": ["all-gather"], "broadcast": ["broadcast"]}[run.op]


def _steps(run: Run) -> list[Step]:
    """Group the recorded events into steps and replay the data they carry into buffers."""
    order = _phase_order(run)
    evs = run.tracer.data_events()
    keys = sorted({(order.index(e["phase"]), e["step"]) for e in evs})
    views = [v.copy() for v in run.initial]
    steps = []
    for i, (p, s) in enumerate(keys):
        st = Step(i, order[p], s)
        mine = [e for e in evs if e["phase"] == order[p] and e["step"] == s]
        st.sends = sorted((e for e in mine if e["action"] == "send"), key=lambda e: e["rank"])
        groups: dict = {}
        for e in mine:
            if e["action"] == "send":
                continue
            if "data" in e:
                off = e.get("offset", 0)
                views[e["rank"]][off:off + e["data"].size] = e["data"]
            g = groups.setdefault((e["rank"], e["action"], e["seg"]), {
                "rank": e["rank"], "action": e["action"], "seg": e["seg"], "peer": e["peer"],
                "nbytes": 0, "chunks": 0, "lo": math.inf, "hi": 0})
            g["nbytes"] += int(e["nbytes"])
            g["chunks"] += 1
            if "offset" in e:
                g["lo"], g["hi"] = min(g["lo"], e["offset"]), max(g["hi"], e["offset"] + e["count"])
        st.lands = sorted(groups.values(), key=lambda g: (g["rank"], g["action"] != "recv"))
        st.views = [v.copy() for v in views]
        steps.append(st)
    return steps


# ------------------------------------------------------------------ formulas
def expected_bytes(run: Run) -> dict[int, tuple[int, int, str, str]]:
    """{rank: (sent, received, how sent is computed, how received is computed)} from the formulas."""
    return {r: tuple(v) for r, v in enumerate(ring_volumes(run.op, run.counts, run.itemsize, run.root))}


def expected_steps(run: Run) -> int:
    n = run.world
    if n == 1:
        return 0
    return 2 * (n - 1) if run.op == "all_reduce" else n - 1


def measured_steps(run: Run) -> int:
    """Distinct (phase, step) pairs in which some rank sent (an empty send counts: ranks stay in step)."""
    return len({(e["phase"], e["step"]) for e in run.tracer.data_events() if e["action"] == "send"})


def reference(run: Run) -> list[np.ndarray]:
    """What every rank should hold at the end, computed with numpy."""
    offs = offsets(run.counts)
    if run.op == "all_gather":
        full = np.concatenate(run.inputs)
        return [full] * run.world
    if run.op == "broadcast":
        return [run.inputs[run.root]] * run.world
    total = np.sum(np.stack(run.inputs), axis=0, dtype=run.dtype) if run.world else None
    if run.op == "all_reduce":
        return [total] * run.world
    return [total[offs[r]:offs[r + 1]] for r in range(run.world)]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def checks(run: Run) -> list[Check]:
    """Byte totals, link symmetry, step count and results, each against its formula or numpy."""
    got, want = run.tracer.totals(), expected_bytes(run)
    out = []
    for r in range(run.world):
        g = got.get(r, {"sent": 0, "recv": 0})
        s, rc, _, _ = want[r]
        out.append(Check(f"rank {r} bytes", g["sent"] == s and g["recv"] == rc,
                         f"sent {g['sent']} (formula {s}), received {g['recv']} (formula {rc})"))
    sent_links, recv_links = run.tracer.links(side="send"), run.tracer.links(side="recv")
    sent_links = {k: v for k, v in sent_links.items() if v}
    out.append(Check("links", sent_links == recv_links,
                     "bytes sent on each link = bytes received from it"))
    ms, es = measured_steps(run), expected_steps(run)
    out.append(Check("steps", ms == es, f"{ms} steps (formula {es})"))
    ref = reference(run)
    ok = all(np.array_equal(o, e) for o, e in zip(run.outputs, ref))
    out.append(Check("result", ok, "every rank's output equals numpy's"))
    return out


# ------------------------------------------------------------------ printing
def contributors(value: float, world: int) -> list[int] | None:
    """Ranks whose 10**r is summed in ``value``, or None if it is not such a sum."""
    if world > 8 or not np.isfinite(value) or value != int(value) or value < 0:
        return None
    v, ranks, r = int(value), [], 0
    while v:
        v, d = divmod(v, 10)
        if d > 1:
            return None
        if d:
            ranks.append(r)
        r += 1
    return ranks if r <= world else None


def _fmt_val(v: float) -> str:
    return "." if np.isnan(v) else str(int(v)) if v == int(v) else f"{v:g}"


def format_buffer(view: np.ndarray, counts: list[int]) -> str:
    offs = offsets(counts)
    parts = []
    for s in range(len(counts)):
        seg = view[offs[s]:offs[s + 1]]
        if seg.size == 0:
            parts.append("-")
        elif seg.size > 2 and (np.all(seg == seg[0]) or np.all(np.isnan(seg))):
            parts.append(f"{_fmt_val(seg[0])} x{seg.size}")
        else:
            parts.append(" ".join(_fmt_val(v) for v in seg))
    return "[" + " | ".join(parts) + "]"


def _who(run: Run, view: np.ndarray, lo: int, hi: int) -> str:
    vals = set(view[lo:hi].tolist())
    if len(vals) != 1 or not run.digits:
        return ""
    ranks = contributors(vals.pop(), run.world)
    if ranks is None:
        return ""
    if len(ranks) == 1:
        return f" (rank {ranks[0]}'s data)"
    return " (now the sum of ranks " + ",".join(map(str, ranks)) + ")"


def render(run: Run, show_buffers: bool | None = None) -> str:
    """The step-by-step text explanation, ending with the checks."""
    n, it, counts = run.world, run.itemsize, run.counts
    if show_buffers is None:
        show_buffers = sum(counts) <= 64
    lines = [f"{run.op} of {sum(counts)} x {run.dtype.name} ({run.nbytes} B) on {n} simulated ranks (ring.py)",
             f"chunk: {run.chunk} elements ({run.chunk * it} B)"]
    if run.op == "broadcast":
        lines.append(f"root: rank {run.root}; a pipelined chain root -> root+1 -> ... -> root-1")
        counts = [sum(counts)]  # one piece: the segments play no part
    else:
        lines.append(f"segments (elements): {counts}")
    if run.digits:
        lines.append("rank r starts with 10**r in each element, so each digit of a sum names a rank "
                     "(1011 = ranks 0, 1, 3)")
    if show_buffers:
        lines.append("buffers before:")
        lines += [f"  rank {r}: {format_buffer(run.initial[r], counts)}" for r in range(n)]
    total = len(run.steps)
    for st in run.steps:
        lines.append("")
        lines.append(f"step {st.index + 1}/{total}: {PHASE_NAMES[st.phase]} step {st.phase_step}")
        for e in st.sends:
            lo = e["offset"]
            what = f"seg {e['seg']} [{lo}:{lo + e['count']})" if run.op != "broadcast" else \
                f"buffer [{lo}:{lo + e['count']})"
            chunk_txt = f" in {e['chunks']} chunk{'s' * (e['chunks'] != 1)}" if "chunks" in e else ""
            lines.append(f"  rank {e['rank']} -> rank {e['peer']}: {what}, {e['nbytes']} B{chunk_txt}")
        reduced = {(g["rank"], g["action"], g["seg"]) for g in st.lands}
        for g in st.lands:
            rng = f"[{g['lo']}:{g['hi']})" if g["hi"] > g["lo"] else "(whole buffer)"
            who = _who(run, st.views[g["rank"]], g["lo"], g["hi"]) if g["hi"] > g["lo"] else \
                _who(run, st.views[g["rank"]], 0, sum(counts))
            what = f"seg {g['seg']} {rng}" if run.op != "broadcast" else f"buffer {rng}"
            if g["action"] == "reduce":
                lines.append(f"  rank {g['rank']} reduces {what} from rank {g['peer']} "
                             f"into its own{who}")
            elif (g["rank"], "reduce", g["seg"]) not in reduced:  # a reduce line says it already
                lines.append(f"  rank {g['rank']} receives {what} from rank {g['peer']}: "
                             f"{g['nbytes']} B in {g['chunks']} chunk{'s' * (g['chunks'] != 1)}{who}")
        if show_buffers:
            lines.append("  buffers after:")
            lines += [f"    rank {r}: {format_buffer(st.views[r], counts)}" for r in range(n)]
    lines.append("")
    segs = "" if run.op == "broadcast" else f", s_i = segment i: {', '.join(str(c * it) for c in counts)} B"
    lines.append(f"bytes moved (B = {run.nbytes} B{segs}):")
    got, want = run.tracer.totals(), expected_bytes(run)
    for r in range(n):
        g = got.get(r, {"sent": 0, "recv": 0})
        s, rc, fs, fr = want[r]
        lines.append(f"  rank {r}: sent {g['sent']:>6} B (formula {fs} = {s}), "
                     f"received {g['recv']:>6} B (formula {fr} = {rc})")
    if n > 1 and len(set(counts)) == 1 and run.op != "broadcast":
        factor = "2(N-1)/N" if run.op == "all_reduce" else "(N-1)/N"
        per = round(even_bytes_sent(run.op, run.nbytes, n))
        lines.append(f"  even split: every rank sends {factor} x B = {per} B")
    lines.append("")
    for c in checks(run):
        lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collectives.explain",
                                 description="Run one collective on simulated ranks and show every step.")
    ap.add_argument("op", choices=OPS)
    ap.add_argument("--ranks", "-n", type=int, default=4, help="number of simulated ranks (default 4)")
    ap.add_argument("--count", "-c", type=int, default=16, help="elements in the whole buffer (default 16)")
    ap.add_argument("--counts", help="elements per segment, comma-separated (uneven allowed), e.g. 5,0,3,1")
    ap.add_argument("--dtype", default="float32", choices=DTYPES)
    ap.add_argument("--chunk", type=int, default=None, help="chunk size in elements (default: whole segments)")
    ap.add_argument("--root", type=int, default=0, help="broadcast root")
    ap.add_argument("--buffers", action=argparse.BooleanOptionalAction, default=None,
                    help="print every rank's buffer after each step (default: when count <= 64)")
    ap.add_argument("--svg", help="also draw the steps as an SVG diagram")
    ap.add_argument("--trace", help="also write the Chrome trace (one file per rank)")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")] if args.counts else None
    r = run(args.op, args.ranks, args.count, dtype=args.dtype, chunk=args.chunk, root=args.root,
            counts=counts)
    print(render(r, args.buffers))
    if args.svg:
        from .svg import draw
        draw(r, args.svg)
        print(f"\ndiagram: {args.svg}")
    if args.trace:
        files = r.tracer.write_chrome(args.trace)
        print(f"trace: {', '.join(map(str, files))}")
    return 0 if all(c.ok for c in checks(r)) else 1


if __name__ == "__main__":
    sys.exit(main())
