"""ZeRO stages 0-3 side by side: step time, per-rank memory and bytes sent, beside the ZeRO figures.

    mpirun -n 4 python bench/zero.py --sizes 512,1024,1024,10 --steps 5 --plot zero.png

Trains the numpy MLP of examples/model.py with ``sharding.ZeroOptimizer``
and AdamW at each stage in turn, on the same data, and reports per stage:

- step time: forward + backward + optimizer step, mean over ``--steps``
  timed steps, the slowest rank's;
- memory: ``opt.memory_report()`` (bytes of the live arrays, largest rank)
  beside ``sharding.estimate_memory`` (the ZeRO paper's formulas; "comm" is
  our communication scratch, which the formulas leave out);
- bytes sent per rank in one step, from a :class:`collectives.teach.trace.Tracer`,
  beside ZeRO's volume: (N-1)/N of the gradients (reduce-scatter) plus of the
  weights (all-gather) per gathered pass; an all-reduce is both halves.
  The communicator here sends every all-reduce through the ring
  (small_bytes=0), so even tiny units follow ZeRO's formula; only
  recursive-doubling rounds (none here) would be left out of the count.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)

from collectives import Communicator  # noqa: E402
from collectives.teach.trace import Tracer  # noqa: E402
from collectives.volumes import zero_volume  # noqa: E402,F401  (ZeRO's formula, stated once)

CATS = ("weights", "gradients", "master", "optimizer", "comm")


def ring_bytes_sent(tracer) -> int:
    """Most bytes any rank sent through the ring (recursive-doubling rounds left out), or
    with buffers in the symmetric heap (--symmetric) read from its peers directly."""
    per_rank: dict = {}
    for e in tracer.events:
        direct = e["action"] == "recv" and str(e.get("phase", "")).startswith("direct")
        if direct or (e["action"] == "send" and e.get("phase") != "recursive-doubling"):
            per_rank[e["rank"]] = per_rank.get(e["rank"], 0) + int(e["nbytes"])
    return max(per_rank.values(), default=0)


def bench_stage(comm, stage: int, a, world_mpi) -> dict:
    import model
    from sharding import AdamW, ZeroOptimizer, estimate_memory

    units = model.init_units(a.sizes, seed=0)
    names = list(units)
    psi = sum(arr.size for u in units.values() for arr in u.values())
    pdt = None if a.dtype == "float32" else a.dtype
    opt = ZeroOptimizer(units, comm, stage, AdamW(lr=1e-3), param_dtype=pdt, symmetric=a.symmetric)
    x, y = model.make_data(a.batch * comm.size, a.sizes[0], a.sizes[-1], seed=1)
    xs, ys = x[comm.rank::comm.size], y[comm.rank::comm.size]

    def step():
        loss = model.forward_backward(opt.gather, opt.reduce_grads, names, xs, ys)
        opt.step()
        return loss

    step()  # warm-up: scratch buffers, page faults
    tracer = Tracer()
    comm.tracer = tracer  # one traced step for the byte count, outside the timing
    step()
    comm.tracer = None
    sent = ring_bytes_sent(tracer)
    world_mpi.Barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    dt = (time.perf_counter() - t0) / a.steps
    from mpi4py import MPI
    dt = world_mpi.allreduce(dt, op=MPI.MAX)
    rep = opt.memory_report()
    mem = {c: world_mpi.allreduce(int(rep[c]), op=MPI.MAX) for c in CATS}
    pbytes = np.dtype(a.dtype).itemsize
    # float32 weights at stage 0 are the master copy themselves
    master = 0 if (a.dtype == "float32" and stage == 0) else 4
    est = estimate_memory(psi, comm.size, stage, param_bytes=pbytes, grad_bytes=4,
                          master_bytes=master, state_bytes=8)
    return dict(stage=stage, symmetric=opt.symmetric, ranks=comm.size, params=psi, dtype=a.dtype, step_ms=dt * 1e3, loss=loss,
                memory=mem, memory_total=sum(mem.values()), estimate={c: est[c] for c in CATS},
                estimate_total=est["total"], sent_bytes=sent,
                zero_volume=zero_volume(psi, comm.size, stage, pbytes, 4))


def plot_zero(results: list[dict], path: str) -> None:
    """Step time per stage, and measured memory stacked by category beside the ZeRO estimate."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [r["stage"] for r in results]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 4.2), dpi=110)
    ax1.bar(stages, [r["step_ms"] for r in results], color="#4c72b0")
    ax1.set_xlabel("ZeRO stage")
    ax1.set_ylabel("step time (ms)")
    ax1.set_title("step time (slowest rank)")
    ax1.set_xticks(stages)
    colours = dict(zip(CATS, ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]))
    w = 0.38
    for side, key, hatch in ((-1, "memory", None), (1, "estimate", "//")):
        bottom = np.zeros(len(results))
        for c in CATS:
            vals = np.array([r[key][c] / 2**20 for r in results])
            ax2.bar(np.array(stages) + side * w / 2, vals, w, bottom=bottom, color=colours[c],
                    hatch=hatch, edgecolor="white" if hatch is None else "black", linewidth=0.5,
                    label=c if side < 0 else None)
            bottom += vals
    ax2.set_xticks(stages)
    ax2.set_xlabel("ZeRO stage (left: measured, right hatched: ZeRO estimate)")
    ax2.set_ylabel("MiB per rank")
    ax2.set_title(f"memory per rank, {results[0]['ranks']} ranks, {results[0]['params']:,} params")
    ax2.legend(fontsize=8)
    ax3.bar(np.array(stages) - w / 2, [r["sent_bytes"] / 2**20 for r in results], w, label="traced",
            color="#4c72b0")
    ax3.bar(np.array(stages) + w / 2, [r["zero_volume"] / 2**20 for r in results], w, label="ZeRO volume",
            color="#bbbbbb", hatch="//", edgecolor="black", linewidth=0.5)
    ax3.set_xticks(stages)
    ax3.set_xlabel("ZeRO stage")
    ax3.set_ylabel("MiB sent per rank per step")
    ax3.set_title("communication per step")
    ax3.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="512,1024,1024,10", help="layer widths of the MLP")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per stage")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--symmetric", action="store_true",
                    help="ZeroOptimizer's buffers in the symmetric heap (direct reads; default: plain arrays)")
    ap.add_argument("--json", default=None, help="write the results here (rank 0)")
    ap.add_argument("--plot", default=None, help="draw the PNG here (rank 0)")
    a = ap.parse_args(argv)
    a.sizes = [int(s) for s in a.sizes.split(",")]
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    results = []
    with Communicator(small_bytes=0) as comm:  # every unit through the ring, so bytes follow ZeRO's formula
        for stage in (int(s) for s in a.stages.split(",")):
            results.append(bench_stage(comm, stage, a, world))
    if world.rank == 0:
        print(f"# ZeRO stages on {world.size} ranks, MLP {a.sizes}, {results[0]['params']:,} params, {a.dtype}")
        print(f"{'stage':>5} {'step(ms)':>9} {'loss':>8} {'mem(MiB)':>9} {'est(MiB)':>9} {'comm(MiB)':>9} "
              f"{'sent(KiB)':>10} {'ZeRO(KiB)':>10}")
        for r in results:
            print(f"{r['stage']:>5} {r['step_ms']:>9.2f} {r['loss']:>8.4f} {r['memory_total'] / 2**20:>9.2f} "
                  f"{r['estimate_total'] / 2**20:>9.2f} {r['memory']['comm'] / 2**20:>9.2f} "
                  f"{r['sent_bytes'] / 1024:>10.1f} {r['zero_volume'] / 1024:>10.1f}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1)
            print(f"# wrote {a.json}")
        if a.plot:
            plot_zero(results, a.plot)
            print(f"# wrote {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
