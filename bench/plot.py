"""Draw busbw against message size from bench/collectives.py records.

    python bench/plot.py bench/results/collectives-cpu-n2.json -o busbw.png --membw auto

One line per (algorithm, op) (and dtype/device when a file mixes several),
both axes logarithmic, and the machine's memory bandwidth as a dashed line:
on CPU ranks of one machine every byte crosses memory, so that is the
ceiling. Cases with wrong results are marked with a red cross.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

STYLES = {"ring": "-", "mpi": "--", "nccl": ":", "p2p": "-."}
MARKERS = {"all_reduce": "o", "reduce_scatter": "s", "all_gather": "^", "broadcast": "D"}


def human_bytes(n: float, _pos=None) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n:.0f}"


def plot_busbw(records: list[dict], path: str, membw_gbps: float | None = None,
               title: str | None = None) -> list[str]:
    """Write a PNG of busbw (GB/s) against bytes, one line per algorithm and op; return the legend.

    Args:
      records: dicts with op, algorithm, dtype, bytes, ranks, time_us, algbw,
        busbw (GB/s) and wrong, as bench/collectives.py writes them.
      path: the PNG to write.
      membw_gbps: the memory bandwidth limit to draw (GB/s), or None.
      title: defaults to the ranks, dtypes and devices in the records.
    """
    records = [r for r in records if r.get("bytes", 0) > 0 and r.get("busbw", 0) > 0]
    if not records:
        raise ValueError("plot_busbw: no records with bytes > 0 and busbw > 0")
    several = {k: len({r.get(k) for r in records}) > 1 for k in ("dtype", "device", "ranks")}
    lines = defaultdict(list)
    for r in records:
        key = (r["algorithm"], r["op"]) + tuple(r.get(k) for k in ("dtype", "device", "ranks") if several[k])
        lines[key].append(r)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for key, rs in sorted(lines.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rs.sort(key=lambda r: r["bytes"])
        alg, op = key[0], key[1]
        label = " ".join([alg, op] + [str(k) for k in key[2:]])
        ax.plot([r["bytes"] for r in rs], [r["busbw"] for r in rs], STYLES.get(alg, "-."),
                marker=MARKERS.get(op, "x"), markersize=4, label=label)
        bad = [r for r in rs if r.get("wrong")]
        if bad:
            ax.plot([r["bytes"] for r in bad], [r["busbw"] for r in bad], "x", color="red",
                    markersize=9, label=f"{label}: wrong results")
    if membw_gbps:
        ax.axhline(membw_gbps, color="black", linestyle="--", linewidth=1.2)
        ax.annotate(f"memory bandwidth (copy, read+write): {membw_gbps:.1f} GB/s",
                    xy=(0.01, membw_gbps), xycoords=("axes fraction", "data"),
                    xytext=(0, 4), textcoords="offset points", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(human_bytes))
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    if title is None:
        ranks = sorted({r.get("ranks") for r in records}, key=str)
        dtypes = sorted({str(r.get("dtype")) for r in records})
        devices = sorted({str(r.get("device", "cpu")) for r in records})
        title = f"bus bandwidth, {'/'.join(map(str, ranks))} ranks, {'/'.join(dtypes)}, {'/'.join(devices)}"
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.15)
    legend = ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return [t.get_text() for t in legend.get_texts()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+", help="records written by bench/collectives.py --json")
    ap.add_argument("-o", "--out", default="busbw.png")
    ap.add_argument("--membw", default=None,
                    help="memory bandwidth line in GB/s, or 'auto' to measure it now (bench/membw.py)")
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    records = []
    for p in a.json:
        with open(p) as f:
            doc = json.load(f)
        records += doc["records"] if isinstance(doc, dict) else doc
    membw = None
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
