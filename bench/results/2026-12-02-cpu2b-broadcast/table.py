"""Median and lowest over this folder's launches of ring's paired ratio to a baseline, per size and
collective: python table.py FOLDER KIND VS (KIND: sweep or fresh; VS: mpi or deepspeed)."""
import glob
import json
import statistics
import sys

d, kind, vs = sys.argv[1:4]
runs = [json.load(open(f)) for f in sorted(glob.glob(f"{d}/{kind}-[0-9].json"))]
ring = [[r for r in recs if r["algorithm"] == "ring" and f"ratio_vs_{vs}" in r] for recs in runs]
ops = list(dict.fromkeys(r["op"] for r in ring[0]))
sizes = sorted({r["bytes"] for r in ring[0]})
print(f"| size | " + " | ".join(ops) + " |")
print("|---" * (len(ops) + 1) + "|")
for b in sizes:
    cells = []
    for op in ops:
        v = [r[f"ratio_vs_{vs}"] for recs in ring for r in recs if r["op"] == op and r["bytes"] == b]
        cells.append(f"{statistics.median(v):.2f} ({min(v):.2f})" if v else "-")
    name = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
    print(f"| {name} | " + " | ".join(cells) + " |")
