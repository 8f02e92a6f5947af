import sys, time
import numpy as np
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "../../.."))
from collectives import Communicator
from mpi4py import MPI
w = MPI.COMM_WORLD
c = Communicator()
def timeit(fn, k):
    w.Barrier()
    t0 = time.perf_counter()
    for _ in range(k): fn()
    return w.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX)
for op, nb in [(o, s) for s in map(int, sys.argv[2].split(",")) for o in sys.argv[1].split(",")]:
    n = nb // 4
    if op == "ag":
        x = np.ones(n // 2, np.float32); o = np.empty(n, np.float32)
        cases = {"raw": lambda: w.Allgather(x, o), "same": lambda: c.all_gather(x, out=o), "fresh": lambda: c.all_gather(x[:], out=o[:])}
    elif op == "rs":
        x = np.ones(n, np.float32); o = np.empty(n // 2, np.float32)
        cases = {"raw": lambda: w.Reduce_scatter_block(x, o), "same": lambda: c.reduce_scatter(x, out=o), "fresh": lambda: c.reduce_scatter(x[:], out=o[:])}
    else:
        x = np.ones(n, np.float32); o = np.empty(n, np.float32)
        cases = {"raw": lambda: w.Allreduce(x, o), "same": lambda: c.all_reduce(x, out=o), "fresh": lambda: c.all_reduce(x[:], out=o[:])}
    for f in cases.values():
        for _ in range(3): f()
    k = max(3, int(2e-3 / max(timeit(cases["raw"], 3), 1e-7)))
    t = {kk: [] for kk in cases}
    for r in range(7):
        for kk, f in cases.items():
            t[kk].append(timeit(f, k))
    if w.rank == 0:
        print(op, nb, " ".join(f"{kk} {np.median(v)*1e6:8.1f}us {np.median([a/b for a,b in zip(t['raw'],v)]):.2f}x" for kk, v in t.items()), c.road_taken(), c.lane.stats()["runs"], flush=True)
c.close()
