"""explain's simulation: one collective of the real ring (ring.py) on simulated ranks,
recorded by a Tracer that keeps every chunk, grouped into steps, and checked
against the byte formulas of volumes.py and numpy (see explain.py for the CLI).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..host import ring
from ..context import Context
from ..dtypes import DATA_COLLECTIVES
from ..kernels import kernels_for
from ..host.schedule import offsets, split_counts
from .simulate import simulate
from .trace import Tracer
from ..volumes import ring_volumes

OPS = DATA_COLLECTIVES
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
