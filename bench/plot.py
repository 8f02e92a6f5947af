"""Draw busbw against message size from bench/collectives.py records.

    python bench/plot.py bench/results/collectives-cpu-n2.json -o busbw.png --membw auto

One panel per collective, one colour per algorithm (the same colour in every
panel), both axes logarithmic, and the machine's memory bandwidth as a
dashed black line in each panel: on CPU ranks of one machine every byte
crosses memory. The dotted line is what memory allows that collective (the
records' ``roofline_gbps``: collectives/volumes.py ``memory_roofline``, each
input read once and each output written once). When a file mixes dtypes, devices
or rank counts, they differ by line style. Cases with wrong results are
marked with a red cross.
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
# One colour per algorithm, fixed, so a reader finds "ring" in the same colour in every panel and every plot.
COLORS = {"ring": "tab:blue", "mpi": "tab:orange", "gloo": "tab:green", "torch": "tab:red",
          "p2p": "tab:purple", "nccl": "tab:brown"}
SPARE = ("tab:pink", "tab:olive", "tab:cyan", "tab:gray")
VARIANT_STYLES = ("-", "--", ":", "-.")


def human_bytes(n: float, _pos=None) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n:.0f}"


def algorithm_colors(algorithms) -> dict[str, str]:
    """A colour for each algorithm: its own when it has one, else a spare one in sorted order."""
    algs = sorted(set(algorithms))
    out, spare = {}, iter(SPARE * (1 + len(algs)))
    for alg in algs:
        out[alg] = COLORS.get(alg) or next(spare)
    return out


def plot_busbw(records: list[dict], path: str, membw_gbps: float | None = None,
               title: str | None = None) -> dict[str, dict[str, str]]:
    """Write a PNG of busbw (GB/s) against bytes, one panel per op; return {op: {line label: colour}}.

    Args:
      records: dicts with op, algorithm, dtype, bytes, ranks, time_us, algbw,
        busbw (GB/s) and wrong, as bench/collectives.py writes them.
      path: the PNG to write.
      membw_gbps: the memory bandwidth roofline to draw in each panel (GB/s), or None.
      title: defaults to the ranks, dtypes and devices in the records.
    """
    records = [r for r in records if r.get("bytes", 0) > 0 and r.get("busbw", 0) > 0]
    if not records:
        raise ValueError("plot_busbw: no records with bytes > 0 and busbw > 0")
    ops = [o for o in OPS if any(r["op"] == o for r in records)]
    ops += sorted({r["op"] for r in records} - set(ops))
    colors = algorithm_colors(r["algorithm"] for r in records)
    several = [k for k in ("dtype", "device", "ranks") if len({r.get(k) for r in records}) > 1]
    variants = sorted({tuple(str(r.get(k)) for k in several) for r in records})
    cols = min(len(ops), 2)
    rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.4 * rows), dpi=100, squeeze=False)
    drawn: dict[str, dict[str, str]] = {}
    for ax, op in zip(axes.flat, ops):
        lines = defaultdict(list)
        for r in records:
            if r["op"] == op:
                lines[(r["algorithm"], tuple(str(r.get(k)) for k in several))].append(r)
        drawn[op] = {}
        for (alg, variant), rs in sorted(lines.items()):
            rs.sort(key=lambda r: r["bytes"])
            label = " ".join((alg,) + variant)
            ax.plot([r["bytes"] for r in rs], [r["busbw"] for r in rs],
                    VARIANT_STYLES[variants.index(variant) % len(VARIANT_STYLES)],
                    color=colors[alg], marker="o", markersize=3, label=label)
            drawn[op][label] = colors[alg]
            bad = [r for r in rs if r.get("wrong")]
            if bad:
                ax.plot([r["bytes"] for r in bad], [r["busbw"] for r in bad], "x", color="red",
                        markersize=9, markeredgewidth=2, label=f"{label}: wrong results")
                drawn[op][f"{label}: wrong results"] = "red"
        if membw_gbps:
            ax.axhline(membw_gbps, color="black", linestyle="--", linewidth=1.2,
                       label=f"memory bandwidth {membw_gbps:.1f} GB/s")
        roofs = {r.get("roofline_gbps") for r in records if r["op"] == op}  # bench/collectives.py: volumes.py's
        if len(roofs) == 1 and None not in roofs:  # what memory allows this collective (one rank count)
            roof = roofs.pop()
            ax.axhline(roof, color="black", linestyle=":", linewidth=1.2,
                       label=f"memory roofline of {op.replace('_', '-')} {roof:.1f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(human_bytes))
        ax.set_title(op.replace("_", "-"))
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.15)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    if title is None:
        ranks = sorted({r.get("ranks") for r in records}, key=str)
        dtypes = sorted({str(r.get("dtype")) for r in records})
        devices = sorted({str(r.get("device", "cpu")) for r in records})
        title = f"bus bandwidth, {'/'.join(map(str, ranks))} ranks, {'/'.join(dtypes)}, {'/'.join(devices)}"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return drawn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+", help="records written by bench/collectives.py --json")
    ap.add_argument("-o", "--out", default="busbw.png")
    ap.add_argument("--membw", default=None,
                    help="memory bandwidth line in GB/s, or 'auto' to measure it now (bench/membw.py); "
                         "default: the one the benchmark measured, if its records carry it")
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    records = []
    for p in a.json:
        with open(p) as f:
            doc = json.load(f)
        records += doc["records"] if isinstance(doc, dict) else doc
    membw = next((r["membw_gbps"] for r in records if r.get("membw_gbps")), None)  # measured in the run
    if a.membw == "auto":
        from membw import measure_membw
        membw = measure_membw()
    elif a.membw:
        membw = float(a.membw)
    plot_busbw(records, a.out, membw_gbps=membw, title=a.title)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
