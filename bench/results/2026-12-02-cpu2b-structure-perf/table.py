"""Median busbw per (op, bytes, algorithm) over the rounds of each side; new/base ratio, round-paired."""
import json, sys, glob, statistics, os
d = sys.argv[1]
def load(side):
    out = {}
    for f in sorted(glob.glob(f"{d}/{side}-*.json")):
        i = int(f.rsplit("-", 1)[1].split(".")[0])
        for r in json.load(open(f)):
            out.setdefault((r["op"], r["bytes"], r["algorithm"]), {})[i] = r
    return out
b, n = load("base"), load("new")
print(f"| op | bytes | algorithm | base busbw GB/s | new busbw GB/s | new/base (median of paired rounds) | #wrong base/new |")
print("|---|---:|---|---:|---:|---:|---:|")
worst = []
for k in sorted(b, key=lambda k: (k[0], k[1], k[2])):
    if k not in n: continue
    rounds = sorted(set(b[k]) & set(n[k]))
    ratios = [n[k][i]["busbw"] / b[k][i]["busbw"] for i in rounds if b[k][i]["busbw"] > 0]
    mb = statistics.median(b[k][i]["busbw"] for i in rounds)
    mn = statistics.median(n[k][i]["busbw"] for i in rounds)
    r = statistics.median(ratios) if ratios else float("nan")
    wb = sum(b[k][i]["wrong"] for i in rounds); wn = sum(n[k][i]["wrong"] for i in rounds)
    flag = "" if r >= 0.9 else " **<0.90**"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {mb:.3f} | {mn:.3f} | {r:.2f}{flag} | {wb}/{wn} |")
    worst.append((r, k))
worst.sort()
print()
for alg in ("ring", "mpi"):
    w = [x for x in worst if x[1][2] == alg]
    if w: print(f"lowest {alg}: {w[0][0]:.2f} at {w[0][1][0]} {w[0][1][1]} B; highest {w[-1][0]:.2f}")
