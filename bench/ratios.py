"""Markdown tables of bench/collectives.py's paired ratios, from its JSON.

    python bench/ratios.py RESULTS.json [MORE.json ...] [--algorithm ring] [--vs mpi] [--times]

One row per size, one column per collective: the algorithm's "vs" ratio (the
median of round-by-round paired ratios, > 1 is faster), or with ``--times`` its
time and the baseline's in microseconds. Given several launches' files, each
cell is the median of their ratios with the lowest launch in brackets (with
``--times``, the medians of the algorithm's time and of the baseline's).
``--breakdown`` prints the per-call split of a --breakdown run instead.
"""
from __future__ import annotations

import argparse
import json
import statistics


def size_name(b: int) -> str:
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def table(recs, alg: str, vs: str, times: bool) -> str:
    return launches([recs], alg, vs, times)


def launches(runs, alg: str, vs: str, times: bool = False) -> str:
    """The table over one launch's records, or the median (lowest) over several launches'."""
    rows = [[r for r in recs if r.get("algorithm") == alg and not r.get("breakdown")] for recs in runs]
    ops = list(dict.fromkeys(r["op"] for rs in rows for r in rs))
    sizes = sorted({r["bytes"] for rs in rows for r in rs})
    out = ["| size | " + " | ".join(ops) + " |", "|---" * (len(ops) + 1) + "|"]
    for s in sizes:
        cells = []
        for op in ops:
            got = [r for rs in rows for r in rs if r["op"] == op and r["bytes"] == s and f"ratio_vs_{vs}" in r]
            if not got:
                cells.append("-")
            elif len(runs) > 1 and times:  # medians over launches: our time / the baseline's
                mine = statistics.median(r["time_us"] for r in got)
                base = statistics.median(statistics.median(r[f"{vs}_rounds_us"]) for r in got)
                cells.append(f"{mine:.1f} / {base:.1f} us")
            elif len(runs) > 1:
                v = sorted(r[f"ratio_vs_{vs}"] for r in got)
                cells.append(f"{statistics.median(v):.2f} ({v[0]:.2f})")
            elif times:
                r = got[0]
                base = sorted(r[f"{vs}_rounds_us"])[len(r[f"{vs}_rounds_us"]) // 2]
                cells.append(f"{r['time_us']:.1f} / {base:.1f} us ({r[f'ratio_vs_{vs}']:.2f}x)")
            else:
                cells.append(f"{got[0][f'ratio_vs_{vs}']:.2f}x")
        out.append(f"| {size_name(s)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def breakdown(recs) -> str:
    keys = ("mpi", "call", "fresh", "checks", "agreement", "movement")
    out = ["| collective | size | raw MPI | call | fresh view | checks (a miss) | agreement | movement | rest | "
           "dist.* | torch's API | our group |", "|---" * 12 + "|"]
    for r in (q for q in recs if q.get("breakdown")):
        p = r["parts_us"]
        more = [p.get("dist"), p.get("torch_api"), r.get("group_us")]
        cells = [f"{p[k]:.2f}" for k in keys] + [f"{r['rest_us']:.2f}"] + \
                [f"{v:.2f}" if v is not None else "-" for v in more]
        out.append(f"| {r['op']} | {size_name(r['bytes'])} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="+", help="one launch's JSON, or several launches' (median and lowest)")
    p.add_argument("--algorithm", default="ring")
    p.add_argument("--vs", default="mpi")
    p.add_argument("--times", action="store_true")
    p.add_argument("--breakdown", action="store_true")
    a = p.parse_args(argv)
    runs = []
    for name in a.json:
        with open(name) as f:
            runs.append(json.load(f))
    print(breakdown(runs[0]) if a.breakdown else launches(runs, a.algorithm, a.vs, a.times))


if __name__ == "__main__":
    main()
