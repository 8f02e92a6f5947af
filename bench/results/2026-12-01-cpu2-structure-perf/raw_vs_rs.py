import numpy as np, time, sys, os
from mpi4py import MPI
from collectives import Communicator
c = Communicator(algorithm="ring", verify=True)
w = MPI.COMM_WORLD; r = w.Get_rank(); peer = 1 - r
def t_rs(x, o, k=30):
    for _ in range(5): c.reduce_scatter(x, out=o)
    c.barrier(); t = time.perf_counter()
    for _ in range(k): c.reduce_scatter(x, out=o)
    return (time.perf_counter() - t) / k * 1e6
def t_raw(x, o, k=30):
    n = o.size
    seg = x[(peer) * n:(peer + 1) * n]
    for i in range(k + 5):
        if i == 5: w.Barrier(); t = time.perf_counter()
        rq = [w.Isend(seg, peer, 7), w.Irecv(o, peer, 7)]
        MPI.Request.Waitall(rq)
    return (time.perf_counter() - t) / k * 1e6
x = np.ones(1 << 20, np.float32); o = np.empty(1 << 19, np.float32)
a = (t_rs(x, o), t_raw(x, o))
if os.environ.get("PRE") == "1":
    nb = 1024
    while nb <= 64 << 20:
        y = np.ones(nb // 4, np.float32); yo = np.empty_like(y)
        for _ in range(10): c.all_reduce(y, out=yo)
        nb *= 4
    del y, yo
x2 = np.ones(1 << 20, np.float32); o2 = np.empty(1 << 19, np.float32)
b = (t_rs(x2, o2), t_raw(x2, o2), t_rs(x, o), t_raw(x, o))
if r == 0: print(sys.argv[1], os.environ.get("PRE"), "before: rs %.0f raw %.0f | after, new arrays: rs %.0f raw %.0f | after, old arrays: rs %.0f raw %.0f" % (a + b))
