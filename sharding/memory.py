"""Memory: what a ZeroOptimizer holds (measured) and what ZeRO says it should.

The ZeRO paper (Rajbhandari et al., 2020, Figure 1) counts, for Ψ parameters
on N ranks with mixed-precision Adam: 2Ψ bytes of fp16 weights, 2Ψ of fp16
gradients and KΨ of optimizer state (K = 12: fp32 master weights, momentum
and variance), so

    stage 0: (2 + 2 + K)Ψ      stage 1: (2 + 2)Ψ + KΨ/N
    stage 2: 2Ψ + (2 + K)Ψ/N   stage 3: (2 + 2 + K)Ψ/N

    python -m sharding.memory --params 7.5e9 --world 64
"""
from __future__ import annotations

import argparse
import sys

from .estimate import CATEGORIES, estimate_memory

__all__ = ["estimate_memory", "measure", "format_report"]


def _root(a):
    """The array that owns ``a``'s memory (a heap window's whole segment for heap arrays)."""
    while getattr(a, "base", None) is not None and hasattr(a.base, "nbytes"):
        a = a.base
    return a


def _trace_bytes(tracer, rank: int) -> int:
    """What a tracer holds for this rank: its event records (and copied payloads)."""
    if tracer is None:
        return 0
    total = 0
    for ev in list(tracer.events) + list(tracer.collectives):
        if ev.get("rank") == rank:
            total += sys.getsizeof(ev) + sum(sys.getsizeof(v) for v in ev.values())
            data = ev.get("data")
            total += int(getattr(data, "nbytes", 0))
    return total


def comm_parts(comm) -> dict:
    """Bytes the communicator holds, by part, through its public accessors.

    ``scratch_bytes()`` covers the ring's receive and partial-sum buffers and
    the agreement buffers (views of them). A communicator that also offers
    ``memory_bytes() -> {part: bytes}`` (device staging, buffers of abandoned
    requests, ...) is asked for that instead."""
    parts = dict(comm.memory_bytes()) if hasattr(comm, "memory_bytes") else {"scratch": comm.scratch_bytes()}
    parts["trace"] = _trace_bytes(getattr(comm, "tracer", None), comm.rank)
    return parts


def measure(opt) -> dict:
    """Bytes of the live arrays a ZeroOptimizer holds on this rank, by category,
    plus ``comm_parts``: what the "comm" category is made of.
    An array counted once (e.g. float32 stage-0 weights that are also the master)."""
    seen, out = set(), {c: 0 for c in CATEGORIES}
    parts = {"buckets": 0}

    def add(cat, a):
        if a is None:
            return
        r = _root(a)
        if id(r) in seen:
            return
        seen.add(id(r))
        out[cat] += int(r.nbytes)
        if cat == "comm":
            parts["buckets"] += int(r.nbytes)

    for u in opt.units.values():
        add("weights", u.full)
        add("weights", u.pshard)
        add("master", u.master)
        for s in u.state.values():
            add("optimizer", s)
        add("gradients", u.grad)
        for p in u.pending:
            for b in p.buffers:
                add("comm", b)
    g = opt.gatherer
    for p in (g.in_use.values() if g is not None else ()):  # stage 3: units a `with gather` uses now (the peak)
        for b in p.buffers:
            add("weights", b)
    for p in (g.prefetched.values() if g is not None else ()):  # stage 3: prefetches
        for b in p.buffers:
            add("comm", b)
    for b in opt.reducer.live:
        add("comm", b)
    pool = opt.reducer.pool  # stages 2-3 on the symmetric heap: the reduce-scatter inputs
    for b in (pool.arrays if pool is not None else ()):
        add("comm", b)
    parts.update(comm_parts(opt.comm))
    out["comm"] += sum(v for k, v in parts.items() if k != "buckets")
    out["total"] = sum(out[c] for c in CATEGORIES)
    out["comm_parts"] = parts
    return out


def format_report(rep: dict, est: dict | None = None) -> str:
    """One line per category, in MB, beside the estimate when given."""
    lines = []
    for c in CATEGORIES + ("total",):
        line = f"  {c:<10} {rep[c] / 1e6:10.2f} MB"
        if est is not None and c == "comm" and not est.get(c):
            line += "   (outside ZeRO's formula: the ring's scratch and in-flight buckets)"
        elif est is not None:
            line += f"   (ZeRO estimate {est[c] / 1e6:10.2f} MB)"
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="ZeRO per-rank memory (paper Figure 1), in GB (1e9 bytes)")
    ap.add_argument("--params", type=float, required=True, help="number of parameters Ψ, e.g. 7.5e9")
    ap.add_argument("--world", type=int, required=True, help="number of ranks N")
    ap.add_argument("--k", type=int, default=12, help="optimizer bytes per parameter (12: mixed-precision Adam)")
    a = ap.parse_args(argv)
    if not a.params > 0 or a.world < 1 or a.k < 0:
        sys.exit(f"sharding.memory: need --params > 0, --world >= 1 and --k >= 0 "
                 f"(got --params {a.params:g} --world {a.world} --k {a.k})")
    figs = [estimate_memory(a.params, a.world, s, master_bytes=4, state_bytes=a.k - 4)["total"] / 1e9
            for s in range(4)]
    print(f"params {a.params:.3g}  world {a.world}  K {a.k}")
    print("  baseline  stage1(Pos)  stage2(Pos+g)  stage3(Pos+g+p)")
    print("  " + "  ".join(f"{f:.1f}".removesuffix(".0").rjust(w - 3) + " GB" for f, w in zip(figs, (8, 11, 13, 15))))


if __name__ == "__main__":
    main()
