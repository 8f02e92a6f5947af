import sys, time
from collectives import Communicator
import numpy as np
from mpi4py import MPI
w = MPI.COMM_WORLD; n, r = w.size, w.rank
roads = sys.argv[1].split(",")
comms = {k: Communicator(timeout=60, road=None if k == "auto" else {"all_reduce": k}) for k in roads}
for mb in [float(a) for a in sys.argv[2:]]:
    N = int(mb * 2**20) // 4
    xs = [np.random.default_rng(q).integers(-8, 8, N).astype(np.float32) for q in range(n)]
    x = xs[r].copy(); out = np.empty(N, np.float32); want = xs[0] + xs[1]
    res = {k: [] for k in comms}
    for rnd in range(9):
        for k, c in comms.items():
            c.all_reduce(x, out=out)
            if not np.array_equal(out, want): print("WRONG", k, mb)
            w.Barrier(); t = time.perf_counter(); it = max(3, int(32 // mb))
            for _ in range(it): c.all_reduce(x, out=out)
            res[k].append(w.allreduce((time.perf_counter() - t) / it, MPI.MAX) * 1e6)
    if r == 0:
        base = res[roads[0]]
        print(f"{mb} MiB: " + "  ".join(f"{k} {np.median(v):.0f}us ({np.median([a/b for a,b in zip(v, base)]):.2f})" for k, v in res.items()), flush=True)
