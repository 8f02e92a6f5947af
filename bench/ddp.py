"""Training steps per second with torch DDP and FSDP2, over ringzero and over Gloo, in one run.

    mpirun -n 2 python bench/ddp.py --batch 16 --json ddp.json --plot ddp.png
    mpirun -n 2 python bench/ddp.py --model mlp,transformer --steps 5 --rounds 7

A PyTorch trainer switches to ringzero with one line (``backend="ringzero"``,
collectives/torch_backend.py). This measures what that buys on a real
trainer: the same model, data and optimizer wrapped in DDP or FSDP2
(``fully_shard``), once over a ringzero process group and once over Gloo.

Fairness as in bench/collectives.py: every configuration (model x wrapper x
backend) is built from the same seed and trains on the same per-rank batch;
they run in rounds, taking turns (each going first in turn), ``--steps``
optimizer steps per turn; a step's time is the slowest rank's. The
"vs gloo" column is the median over rounds of the paired ratio (Gloo's time
/ ringzero's time in the same round: > 1 means ringzero trains faster).
Both backends see the same gradients, so their losses must agree; the table
prints the largest relative difference.

The ceiling: backend ``free`` is the same wrapper with communication that
costs nothing. DDP gets a comm hook that returns its bucket untouched in a
completed future (DDP's own bucketing, copies and hook calls remain; no
bytes move and nothing is summed). FSDP2 gets a custom all-gather and
reduce-scatter (``set_custom_all_gather``/``set_custom_reduce_scatter``) that
only copy locally what the collective would have written: the own shard into
every slot of the gathered output, the own slice of the gradients into the
reduce-scatter output. Free's "vs gloo" (Gloo / free, paired per round) is
the most any backend could gain; ringzero's row shows it as "ceiling" beside
its own ratio, and "share" = (gloo - ringzero) / (gloo - free), the part of
that possible gain ringzero gets (median over rounds, paired). Free trains on
unreduced gradients, so its losses are not compared with Gloo's.

"cpu(ms)" is the CPU time per step of the busiest rank's process, all its
threads (median over rounds). On a 2-core node shared with other work the
step times swing with the load; the CPU times much less, and they say where
the time goes: ringzero's cpu minus free's is the all-reduce's own work,
and, on a rank bound to one core (mpirun's default here), step minus cpu is
time its threads spent waiting (for a peer, or for the core).

``fsdp2-heap`` is FSDP2 over ringzero with
``set_allocate_memory_from_process_group_for_comm(True)``: its all-gather and
reduce-scatter buffers come from the group's heap (torch_backend/heap_pool.py),
so those collectives take the direct roads with no staging copy. Gloo has no
such allocator; its "vs gloo" pairs with Gloo's plain FSDP2 row.

Models: ``mlp`` (about 10.5M parameters: 512 -> 2048 -> 2048 -> 2048 -> 512,
the default) and ``transformer`` (one encoder block, d_model 512, 8 heads,
feed-forward 2048, sequences of 64: 3.2M). ``--width``/``--hidden`` shrink
the MLP (the tests train a tiny one). Without collectives.torch_backend in
this checkout the run has no ringzero rows, and says so.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # bench/ helpers; the repository goes before it, so that
sys.path.insert(0, os.path.join(HERE, ".."))  # "collectives" is the package, not bench/collectives.py

import collectives  # noqa: E402,F401  (before mpi4py starts MPI: see collectives/__init__)
from mpi4py import MPI  # noqa: E402
from torch_groups import have_ringzero_backend, init_groups  # noqa: E402

MODES = ("ddp", "fsdp2", "fsdp2-heap")  # fsdp2-heap: ringzero only (FSDP2's buffers in its heap)
MODELS = ("mlp", "transformer")
BACKENDS = ("ringzero", "gloo", "free")  # free: no communication at all (the ceiling; see above)


def build_model(kind: str, a, seed: int = 0):
    """The model and a function making one rank's (inputs, targets) batch."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if kind == "mlp":
        dims = [a.width] + [a.hidden] * a.layers + [a.width]
        layers = []
        for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(d_in, d_out))
            if i < len(dims) - 2:
                layers.append(nn.GELU())
        model = nn.Sequential(*layers)

        def batch(rank):
            g = torch.Generator().manual_seed(1000 + rank)
            return torch.randn(a.batch, a.width, generator=g), torch.randn(a.batch, a.width, generator=g)
    elif kind == "transformer":
        model = nn.Sequential(nn.TransformerEncoderLayer(a.d_model, a.heads, 4 * a.d_model, dropout=0.0,
                                                         batch_first=True))

        def batch(rank):
            g = torch.Generator().manual_seed(1000 + rank)
            shape = (a.batch, a.seq, a.d_model)
            return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    else:
        raise ValueError(f"unknown model {kind!r}; choose from {', '.join(MODELS)}")
    return model, batch


def free_hook(state, bucket):
    """DDP comm hook of the ``free`` configuration: no communication, the bucket back as it is."""
    import torch

    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


class FreeAllGather:
    """FSDP2's all-gather with no communication (``free``): the own shard, which
    FSDP2 has already copied into its slot of ``output_tensor``, copied into every
    other slot as well, so the gathered parameters are finite (the bytes a
    zero-time network would still have written; the other ranks' weights are
    not these, so free FSDP2 trains other weights than Gloo from the first step)."""

    def allocate(self, size, *, dtype, device):
        import torch

        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        n, r = group.size(), group.rank()
        slots = output_tensor.view(n, -1)
        for i in range(n):
            if i != r:
                slots[i].copy_(input_tensor)
        return None  # done: FSDP2 waits on nothing


class FreeReduceScatter(FreeAllGather):
    """FSDP2's reduce-scatter with no communication (``free``): this rank's slice of
    the unsharded gradients copied to the output, unreduced."""

    def __call__(self, output_tensor, input_tensor, group, op=None, async_op=False):
        output_tensor.copy_(input_tensor.view(group.size(), -1)[group.rank()])
        return None


def wrap(model, mode: str, group, free: bool = False):
    """DDP, or FSDP2 with every top-level layer that has parameters sharded on its own.

    Args:
      free: no communication in training (the ``free`` configuration): ``group``
        is then used only where the wrapper is built (DDP's initial broadcast).
    """
    import torch.distributed as dist

    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model, process_group=group)
        if free:
            ddp.register_comm_hook(None, free_hook)
        return ddp
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    mesh = DeviceMesh.from_group(group if group is not None else dist.group.WORLD, "cpu")
    sharded = [fully_shard(layer, mesh=mesh) for layer in model if any(True for _ in layer.parameters())]
    root = fully_shard(model, mesh=mesh)
    if mode == "fsdp2-heap":
        for m in sharded + [root]:
            m.set_allocate_memory_from_process_group_for_comm(True)
    if free:
        for m in sharded + [root]:
            m.set_custom_all_gather(FreeAllGather())
            m.set_custom_reduce_scatter(FreeReduceScatter())
    return root


class Config:
    """One (model, mode, backend) trainer: its wrapped model, optimizer and batch."""

    def __init__(self, kind: str, mode: str, backend: str, group, a, rank: int):
        import torch

        self.kind, self.mode, self.backend = kind, mode, backend
        model, batch = build_model(kind, a)
        self.params = sum(p.numel() for p in model.parameters())
        self.model = wrap(model, mode, group, free=backend == "free")
        self.opt = torch.optim.SGD(self.model.parameters(), lr=a.lr, momentum=0.9)
        self.x, self.y = batch(rank)
        self.losses: list[float] = []

    def step(self) -> None:
        import torch

        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        self.losses.append(float(loss.detach()))


def plot_ddp(records: list[dict], path: str, title: str) -> None:
    """Bars of steps per second: one group per (model, mode), one bar colour per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from plot import COLORS  # bench/plot.py: the benchmark's colours (ringzero is our ring's)

    colors = {"ringzero": COLORS["ring"], "gloo": COLORS["gloo"], "free": "#b0b0b0"}
    groups = sorted({(r["model"], r["mode"]) for r in records}, key=lambda g: (MODELS.index(g[0]), g[1]))
    backends = [b for b in BACKENDS if any(r["backend"] == b for r in records)]
    w = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(max(5, 2.2 * len(groups)), 4), dpi=100)
    for j, b in enumerate(backends):
        xs, ys = [], []
        for i, g in enumerate(groups):
            r = next((r for r in records if (r["model"], r["mode"], r["backend"]) == (*g, b)), None)
            if r:
                xs.append(i + (j - (len(backends) - 1) / 2) * w)
                ys.append(r["steps_per_s"])
                if r.get("ratio_vs_gloo"):
                    ax.annotate(f"{r['ratio_vs_gloo']:.2f}x", (xs[-1], ys[-1]), ha="center", va="bottom",
                                fontsize=8)
        ax.bar(xs, ys, w, color=colors[b], label="free (no communication)" if b == "free" else b)
    ax.set_xticks(range(len(groups)), [f"{m}\n{mode}" for m, mode in groups])
    ax.set_ylabel("training steps / s")
    ax.set_title(title, fontsize=9)
    top = max((r["steps_per_s"] for r in records), default=1.0)
    ax.set_ylim(0, top * 1.3)  # room for the legend above the bars
    ax.legend(fontsize=8, ncol=len(backends), loc="upper center")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="mlp", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--mode", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    p.add_argument("--backend", default=",".join(BACKENDS),
                   help="comma list of ringzero, gloo, free (free: no communication, the ceiling; ringzero is "
                        "left out, and said so, where it is missing)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per turn")
    p.add_argument("--rounds", type=int, default=5, help="turns per configuration; the median is reported")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per configuration first")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--width", type=int, default=512, help="MLP input and output width")
    p.add_argument("--hidden", type=int, default=2048, help="MLP hidden width")
    p.add_argument("--layers", type=int, default=3, help="MLP hidden layers")
    p.add_argument("--d-model", type=int, default=512, help="transformer width")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=64, help="transformer sequence length")
    p.add_argument("--json", default=None, help="write the results here (rank 0)")
    p.add_argument("--plot", default=None, help="draw steps/s to this PNG (rank 0)")
    a = p.parse_args(argv)
    kinds = [k for k in a.model.split(",") if k]
    modes = [m for m in a.mode.split(",") if m]
    backends = [b for b in a.backend.split(",") if b]
    for name, got, known in (("--model", kinds, MODELS), ("--mode", modes, MODES),
                             ("--backend", backends, BACKENDS)):
        bad = [x for x in got if x not in known]
        if bad or not got:
            p.error(f"{name} {','.join(bad) or '(empty)'}: choose from {', '.join(known)}")
    if a.batch < 1 or a.steps < 1 or a.rounds < 1:
        p.error("--batch, --steps and --rounds must be >= 1")

    world = MPI.COMM_WORLD
    rank, n = world.rank, world.size

    def say(s=""):
        if rank == 0:
            print(s, flush=True)

    notes = []
    if "ringzero" in backends and not have_ringzero_backend():
        backends.remove("ringzero")
        notes.append("ringzero backend not in this checkout (collectives/torch_backend.py): no ringzero rows")
        if not backends:
            p.error("nothing to run: the ringzero backend is missing and --backend has no gloo or free")
    groups = init_groups(world, ringzero="ringzero" in backends)
    import torch
    import torch.distributed as dist

    # free builds its wrapper over the Gloo group (DDP's initial broadcast) and never communicates after
    configs = [Config(k, m, b, groups["gloo" if b == "free" else b], a, rank)
               for k in kinds for m in modes for b in backends if m != "fsdp2-heap" or b == "ringzero"]
    say(f"# ringzero DDP/FSDP2 benchmark: {n} ranks, per-rank batch {a.batch}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} intra-op thread(s) per rank, SGD momentum 0.9, float32")
    for note in notes:
        say(f"# NOTE: {note}")
    for k in kinds:
        say(f"# {k}: {next(c.params for c in configs if c.kind == k):,} parameters")
    say(f"# warmup {a.warmup} steps, then {a.rounds} rounds of {a.steps} steps, configurations taking turns;"
        f" time = median over rounds of (slowest rank's mean step); vs gloo = paired ratio, median over rounds;"
        f" cpu = CPU time of the busiest rank's process (all its threads) per step, median over rounds: on a"
        f" loaded node it moves less than the step time")
    if "free" in backends:
        say("# free = the same wrapper with no communication (DDP: a comm hook returning the bucket untouched;"
            " FSDP2: custom all-gather/reduce-scatter that only copy the own shard locally): the ceiling."
            " ceiling = gloo/free, share = (gloo - ringzero)/(gloo - free), both paired per round, median;"
            " free trains on unreduced gradients, so it has no loss diff")
    for c in configs:
        for _ in range(a.warmup):
            c.step()
    times: dict[int, list[float]] = {i: [] for i in range(len(configs))}
    cpu: dict[int, list[float]] = {i: [] for i in range(len(configs))}  # the process's CPU time, all threads
    order = list(range(len(configs)))
    for rnd in range(a.rounds):
        for i in order[rnd % len(order):] + order[:rnd % len(order)]:
            world.Barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(a.steps):
                configs[i].step()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            times[i].append(world.allreduce(dt / a.steps, op=MPI.MAX))
            cpu[i].append(world.allreduce(dc / a.steps, op=MPI.MAX))
    records = []
    for i, c in enumerate(configs):
        dt = float(np.median(times[i]))
        records.append(dict(model=c.kind, mode=c.mode, backend=c.backend, params=c.params, ranks=n,
                            batch=a.batch, step_ms=dt * 1e3, steps_per_s=1 / dt,
                            rounds_ms=[t * 1e3 for t in times[i]], cpu_ms=float(np.median(cpu[i])) * 1e3,
                            losses=c.losses))
    index = {(c.kind, c.mode, c.backend): i for i, c in enumerate(configs)}
    for i, r in enumerate(records):
        base = "fsdp2" if r["mode"] == "fsdp2-heap" else r["mode"]  # Gloo has no heap: its plain FSDP2
        twin = index.get((r["model"], base, "gloo"))
        if r["backend"] == "gloo" or twin is None:
            continue
        r["ratio_vs_gloo"] = float(np.median([g / t for g, t in zip(times[twin], times[i])]))
        if r["backend"] != "ringzero":
            continue  # free: unreduced gradients, so no loss comparison
        ref = np.array(configs[twin].losses)
        diff = np.abs(np.array(r["losses"]) - ref) / np.maximum(np.abs(ref), 1e-30)
        r["loss_rel_diff_vs_gloo"] = float(np.max(diff))
        free = index.get((r["model"], base, "free"))
        if free is not None:
            r["ceiling_vs_gloo"] = float(np.median([g / f for g, f in zip(times[twin], times[free])]))
            r["gain_share"] = float(np.median([(g - t) / (g - f) if g != f else float("nan")
                                               for g, t, f in zip(times[twin], times[i], times[free])]))
    say()
    say(f"{'model':>12} {'mode':>10} {'backend':>9} {'params':>11} {'step(ms)':>9} {'cpu(ms)':>8} {'steps/s':>8} "
        f"{'vs gloo':>8} {'ceiling':>8} {'share':>6} {'loss diff':>9}")
    for r in records:
        ratio = f"{r['ratio_vs_gloo']:.2f}x" if "ratio_vs_gloo" in r else "-"
        ceiling = f"{r['ceiling_vs_gloo']:.2f}x" if "ceiling_vs_gloo" in r else "-"
        share = f"{100 * r['gain_share']:.0f}%" if "gain_share" in r else "-"
        diff = f"{r['loss_rel_diff_vs_gloo']:.1e}" if "loss_rel_diff_vs_gloo" in r else "-"
        say(f"{r['model']:>12} {r['mode']:>10} {r['backend']:>9} {r['params']:>11,} {r['step_ms']:>9.2f} "
            f"{r['cpu_ms']:>8.2f} {r['steps_per_s']:>8.2f} {ratio:>8} {ceiling:>8} {share:>6} {diff:>9}")
    title = f"training steps/s, {n} ranks, per-rank batch {a.batch}" + (" (no ringzero)" if notes else "")
    if rank == 0 and a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"ranks": n, "batch": a.batch, "torch": torch.__version__, "notes": notes,
                       "records": records}, f, indent=1)
        print(f"# wrote {len(records)} records to {a.json}")
    if rank == 0 and a.plot:
        plot_ddp(records, a.plot, title)
        print(f"# wrote {a.plot}")
    world.Barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
