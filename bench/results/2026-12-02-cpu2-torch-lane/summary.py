"""Medians over the launches in this folder: dist.* time / raw MPI time, torch's API alone / raw MPI
time, and the group's own share, per collective and size (same tensors, fresh views, and the same
tensors with the C++ calls off)."""
import glob
import json
import statistics
import sys

d = sys.argv[1]
for kind in ("small", "small-fresh", "small-off"):
    files = sorted(glob.glob(f"{d}/{kind}-[0-9].json"))
    if not files:  # a folder that ran only some of the kinds
        continue
    recs = [r for f in files for r in json.load(open(f)) if r["algorithm"] == "torch"]
    print(f"## {kind}: {len(files)} launches, medians (dist.* / MPI time: at most 2.0 is the limit)\n")
    print("| op | size | dist.* / MPI | torch's API / MPI | our group (us) | dist.* (us) | MPI (us) | worst launch |")
    print("|---|---|---|---|---|---|---|---|")
    for op in dict.fromkeys(r["op"] for r in recs):
        for b in sorted({r["bytes"] for r in recs if r["op"] == op}):
            rs = [r for r in recs if r["op"] == op and r["bytes"] == b]
            ratio = [1 / r["ratio_vs_mpi"] for r in rs]
            mpi = [statistics.median(r["mpi_rounds_us"]) for r in rs]
            api = [r["torch_api_us"] / m for r, m in zip(rs, mpi)] if all("torch_api_us" in r for r in rs) else None
            ours = [r["overhead_ours_us"] for r in rs if "overhead_ours_us" in r]
            med = statistics.median
            print(f"| {op} | {b // 1024} KiB | {med(ratio):.2f} | {med(api):.2f} | {med(ours):.2f} | "
                  f"{med([r['time_us'] for r in rs]):.1f} | {med(mpi):.1f} | {max(ratio):.2f} |" if api else
                  f"| {op} | {b // 1024} KiB | {med(ratio):.2f} | - | - | - | {med(mpi):.1f} | {max(ratio):.2f} |")
    print()
