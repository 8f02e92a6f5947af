"""What a call costs when its objects are new (a fresh view x[:], out[:] every call)
against the same objects every call, on the Python roads (the small road and the pair
below, with COLLECTIVES_STAGE=0; the staged-ring from 2 MiB with staging on): us a call,
three alternations of N calls each, rank 0's times. Run under mpirun -n 2."""
import sys
import time

import numpy as np

from collectives import Communicator

comm = Communicator()
n = comm.size
print_ = comm.rank == 0
for nbytes in [int(s) << 10 for s in sys.argv[1].split(",")]:
    count = nbytes // 4
    x = np.ones(count, np.float32)
    ar, rs, ag = np.empty(count, np.float32), np.empty(count // n, np.float32), np.empty(count, np.float32)
    piece = np.ones(count // n, np.float32)
    calls = {
        "all_reduce": (lambda: comm.all_reduce(x, out=ar), lambda: comm.all_reduce(x[:], out=ar[:])),
        "reduce_scatter": (lambda: comm.reduce_scatter(x, out=rs), lambda: comm.reduce_scatter(x[:], out=rs[:])),
        "all_gather": (lambda: comm.all_gather(piece, out=ag), lambda: comm.all_gather(piece[:], out=ag[:])),
        "broadcast": (lambda: comm.broadcast(ar, root=0, out=ar), lambda: comm.broadcast(ar[:], root=0, out=ar[:])),
    }
    iters = max(20, min(2000, (64 << 20) // max(nbytes, 1) // 8))
    for op, (same, fresh) in calls.items():
        got = {"same": [], "fresh": []}
        for _ in range(3):
            for name, f in (("same", same), ("fresh", fresh)):
                for _ in range(10):
                    f()
                comm.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    f()
                got[name].append((time.perf_counter() - t0) / iters * 1e6)
        road = comm.road_taken().value
        if print_:
            s, f = np.median(got["same"]), np.median(got["fresh"])
            print(f"{op:15s} {nbytes >> 10:6d} KiB  {road:12s} same {s:8.1f} us  fresh {f:8.1f} us  "
                  f"fresh - same {f - s:6.1f} us", flush=True)
