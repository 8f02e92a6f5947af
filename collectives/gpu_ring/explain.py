"""Teaching: the GPU kernel ring's own source run on simulated ranks, every block's moves shown.

    python -m collectives.gpu_ring.explain --collective all_reduce --ranks 3 --count 24 --channels 2

Runs one call through the kernels' host build (host.py: csrc/ring compiled by
g++, every GPU thread an OS thread) and prints, per rank and block (= channel), round and
step, which slice of which segment it moved from where to where: the input x, its own
slots (which the left neighbour filled), the right neighbour's slots, its output, the
right neighbour's output (direct mode), the small kernels' staging areas. Then every
rank's bytes read + written against plan.traffic's formula (equal, or the text says so),
the slot traffic beside the minimal bytes (inputs read once, outputs written once), and
whether the result equals the host ring's order bit for bit. Needs a source checkout
(bench/) and g++; :func:`explain` returns the text, :func:`main` prints it.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from ..dtypes import to_dtype
from . import layout, plan, reference
from .ring import Ring

PHASES = {"ring": None, "oneshot": ("stage", "fold"), "twoshot": ("stage", "fold", "gather")}


def host_backend(block: int = 4):
    """The kernels' host build (host.py: g++ and CPU threads)."""
    from . import host
    return host.HostBackend(block=block), host.HostBuffer


class _Names:
    """Byte address -> what it is ("x[1]", "out[2]", "slot r2.c0#1", "stage r0.a1")."""

    def __init__(self, ring: Ring):
        self.spans: list[tuple[int, int, str, str]] = []  # start, end, label, kind
        g = ring.geometry
        for r, ws in enumerate(ring.ws_ptrs):
            for c in range(g.channels):
                for k in range(g.slots):
                    at = ws + g.slots_off + (c * g.slots + k) * g.slot_stride
                    self.spans.append((at, at + g.slot_stride, f"slot r{r}.c{c}#{k}", "slot"))
            for a in range(4):
                at = ws + g.stage_off + a * g.stage_bytes
                self.spans.append((at, at + g.stage_bytes, f"{'stage' if a < 2 else 'result'} r{r}.{a % 2}", "stage"))

    def add(self, ptr: int, nbytes: int, label: str, kind: str) -> None:
        self.spans.append((ptr, ptr + max(nbytes, 1), label, kind))

    def __call__(self, ptr: int) -> tuple[str, str]:
        for lo, hi, label, kind in self.spans:
            if lo <= ptr < hi:
                return label, kind
        return f"{ptr:#x}", "?"


def explain(collective: str = "all_reduce", ranks: int = 3, count: int = 24, dtype: str = "float32",
            channels: int = 2, slots: int = 2, slot_bytes: int = 32, direct: bool = False, kernel: str = "ring",
            op: str = "sum") -> str:
    """One call on simulated ranks, block by block; the byte totals checked against plan.traffic.

    Args:
      collective: all_reduce, reduce_scatter or all_gather.
      ranks: simulated ranks (2..8).
      count: elements of the whole buffer.
      dtype: element type name.
      channels: ring channels (small kernels: blocks) per rank.
      slots, slot_bytes: the receive FIFO of each channel.
      direct: the all-gather data goes straight into the right neighbour's output.
      kernel: "ring", "oneshot" or "twoshot".
      op: the reduction (not for all_gather).
    """
    backend, Buffer = host_backend()
    dt = to_dtype(dtype)
    item = dt.itemsize
    geo = layout.Geometry(channels=channels, slots=slots, slot_bytes=slot_bytes, stage_bytes=max(16, -(-count * item // 16) * 16))
    ring = Ring.virtual(backend, ranks, geo, timeout_s=10)
    counts = plan.split_counts(count, ranks, max(1, 16 // item))
    op = None if collective == "all_gather" else op
    names = _Names(ring)
    rng = np.random.default_rng(0)
    xs, xb, ob = [], [], []
    for r in range(ranks):
        n_in = counts[r] if collective == "all_gather" else count
        n_out = counts[r] if collective == "reduce_scatter" else count
        xs.append((rng.integers(-8, 8, n_in) / 4).astype(dt))
        xb.append(Buffer(max(n_in, 1) * item))
        ob.append(Buffer(max(n_out, 1) * item))
        xb[r].view[:n_in * item] = xs[r].view(np.uint8)
        names.add(xb[r].ptr, n_in * item, f"x[{r}]", "x")
        names.add(ob[r].ptr, n_out * item, f"out[{r}]", "out")
    backend.trace(True)
    ring.run(collective, [b.ptr for b in xb], [b.ptr for b in ob], counts, dt, op, kernel=kernel,
             channels=channels, right_outs=[ob[(r + 1) % ranks].ptr for r in range(ranks)] if direct else None)
    events = sorted(backend.trace_events(), key=lambda e: (e[0], e[1], e[2], e[3]))
    backend.trace(False)
    want = reference.expected(collective, xs, counts, op)
    exact = all(reference.same(ob[r].view[:want[r].size * item].view(dt), want[r]) is None for r in range(ranks))

    lines = [f"GPU kernel ring ({kernel} kernel): {collective} of {count} {dtype} on {ranks} simulated ranks, "
             f"{channels} channel(s), {slots} slots of {slot_bytes} B{', direct' if direct else ''}",
             f"segments (elements): {counts}; every block below is one channel of one rank, its own ring",
             "rank.block round step  segment [first, end)   bytes  read -> written"]
    moved = [0] * ranks
    slot_bytes_moved = [0] * ranks
    for rank, ch, rnd, step, seg, g0, nbytes, a, b, d0, d1 in events:
        g0 = g0 // item if collective == "all_gather" else g0  # the all-gather kernels count bytes
        srcs = [names(p) for p in (a, b) if p]
        dsts = [names(p) for p in (d0, d1) if p]
        moved[rank] += nbytes * (len(srcs) + len(dsts))
        slot_bytes_moved[rank] += nbytes * sum(k == "slot" for _, k in srcs + dsts)
        if kernel == "ring":
            phase = "all-gather" if plan.step(collective, rank, ranks, step).gather else "reduce-scatter"
        else:
            phase = PHASES[kernel][step]
        what = " + ".join(n for n, _ in srcs) or "-"
        lines.append(f"  r{rank}.b{ch:<3} {rnd:>4} {step:>3} {phase:<14} seg {seg} [{g0}, {g0 + nbytes // item})"
                     f" {nbytes:>6}  {what} -> {', '.join(n for n, _ in dsts) or '-'}")
    lines.append("bytes per rank (read + written), measured against the formula (plan.traffic):")
    ok = True
    for r in range(ranks):
        minimal, formula = plan.traffic(collective, counts, r, item, direct, kernel=kernel)
        ok &= formula == moved[r]
        lines.append(f"  rank {r}: {moved[r]} B moved, formula {formula} B {'(equal)' if formula == moved[r] else '(DIFFERENT)'}; "
                     f"minimal {minimal} B (input read once, output written once); slots {slot_bytes_moved[r]} B")
    lines.append(f"result: {'bit for bit the host ring' if exact else 'DIFFERENT from the host ring'}; "
                 f"byte totals {'equal their formulas' if ok else 'DIFFER from their formulas'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collective", default="all_reduce", choices=plan.COLLECTIVES)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--slot-bytes", type=int, default=32)
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--kernel", default="ring", choices=("ring", "oneshot", "twoshot"))
    ap.add_argument("--op", default="sum")
    a = ap.parse_args(argv)
    text = explain(a.collective, a.ranks, a.count, a.dtype, a.channels, a.slots, a.slot_bytes, a.direct, a.kernel, a.op)
    print(text)
    return 0 if text.endswith("equal their formulas") and "bit for bit" in text.splitlines()[-1] else 1


if __name__ == "__main__":
    sys.exit(main())
