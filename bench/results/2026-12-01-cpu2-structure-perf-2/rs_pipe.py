import sys, time
from collectives import Communicator
import numpy as np
from mpi4py import MPI
w = MPI.COMM_WORLD; n, r = w.size, w.rank
comms = {"ring": Communicator(timeout=60, road={"reduce_scatter": "ring"}), "pipe": Communicator(timeout=60, road={"reduce_scatter": "pipe"}),
         "staged-ring": Communicator(timeout=60, road={"reduce_scatter": "staged-ring"})}
for mb in [int(a) for a in sys.argv[1:]]:
    N = mb * 2**20 // 4
    x = np.random.default_rng(r).standard_normal(N).astype(np.float32)
    out = np.empty(N // n, np.float32)
    xs = [np.random.default_rng(q).standard_normal(N).astype(np.float32) for q in range(n)]
    want = xs[0][r*N//n:(r+1)*N//n] + xs[1][r*N//n:(r+1)*N//n]
    res = {k: [] for k in comms}
    for rnd in range(7):
        for k, c in comms.items():
            c.reduce_scatter(x, out=out); 
            ok = np.array_equal(out, want)
            w.Barrier(); t = time.perf_counter(); it = max(3, 64 // mb)
            for _ in range(it): c.reduce_scatter(x, out=out)
            dt = (time.perf_counter() - t) / it
            res[k].append(w.allreduce(dt, MPI.MAX) * 1e6)
            if not ok: print("WRONG", k, mb)
    if r == 0:
        print(f"{mb} MiB: " + "  ".join(f"{k} {np.median(v):.0f}us" for k, v in res.items()),
              "ring/staged-ring time", [round(a/b, 2) for a, b in zip(res["ring"], res["staged-ring"])], flush=True)
