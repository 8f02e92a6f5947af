"""Where the direct path's time goes (2 ranks, float32, heap buffers, one launch,
variants interleaved round by round; ratios only on a loaded machine):

  mpirun -n 2 python tests/mpi/symmetric_ceiling.py [sizes in KiB...]

Per collective and size, median microseconds of:
  call    Communicator call on heap buffers (what a user pays)
  algo    the direct algorithm alone (Direct.<collective> with a prepared
          context and header: post, header check, data, flags), no wrapper
  bare    the same data movement with no signalling at all: numpy reading the
          peer's window in place (the ceiling of any direct algorithm here; for
          the all-reduce the better of one phase and two, both printed)
  mpi     Communicator(algorithm="mpi"), the acceptance's baseline
  raw     bare mpi4py (MPI's own collective, no wrapper)
call - algo is the communicator's per-call cost (shared by every algorithm),
algo - bare is the direct protocol's own cost.
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from collectives import Communicator

world = MPI.COMM_WORLD
ring = Communicator(timeout=120)
mpi = Communicator(algorithm="mpi", timeout=120, verify=False)
n, rank = ring.size, ring.rank
peer = 1 - rank
sizes = [int(s) for s in sys.argv[1:]] or [1, 64, 256, 1024, 16384, 65536]
if n != 2:
    raise SystemExit("run with 2 ranks")


def capture(sym, name):
    """Call once through the communicator, keeping the arguments the direct
    algorithm received (context and header) for direct calls afterwards."""
    d = sym.direct
    orig = getattr(d, name)
    got = {}

    def spy(*a, **k):
        got["a"], got["k"] = a, k
        return orig(*a, **k)
    setattr(d, name, spy)
    return got, orig, lambda: setattr(d, name, orig)


def timeit(fns, reps):
    ts = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):  # interleaved: every variant sees the same machine mode
            world.Barrier()
            t = time.perf_counter()
            fn()
            ts[i].append(time.perf_counter() - t)
    return [np.median(t) * 1e6 for t in ts]


def row(name, kib, t):
    if rank == 0:
        call, algo, bare, m, raw = t
        print(f"{name:15s} {kib:6d} KiB  call {call:8.1f}  algo {algo:8.1f}  bare {bare:8.1f}  mpi {m:8.1f}  "
              f"raw {raw:8.1f} us   mpi/call {m / call:5.2f}x  mpi/algo {m / algo:5.2f}x  "
              f"mpi/bare {m / bare:5.2f}x  raw/bare {raw / bare:5.2f}x", flush=True)


ar_times = []
for kib in sizes:
    count = kib * 256
    half = count // 2
    sx = ring.alloc((count,), np.float32)
    sx[:] = 1 + rank
    so = ring.alloc((count,), np.float32)
    sg = ring.alloc((count * 2,), np.float32)
    px, po, pg = np.ones(count, np.float32), np.empty(count, np.float32), np.empty(count * 2, np.float32)
    rs_o = np.empty(half, np.float32)
    sym = ring.symmetric
    win = sym.heap.windows[sym.heap.locate(sx)[0]]
    peer_x = win.peers[peer][:count * 4].view(np.float32)
    reps = 300 if kib <= 64 else 60 if kib <= 4096 else 15
    lo, hi = rank * half, (rank + 1) * half
    plo, phi = peer * half, (peer + 1) * half

    # all-reduce: bare = the two-phase data movement (reduce our half, copy the peer's)
    got, orig, undo = capture(sym, "all_reduce")
    ring.all_reduce(sx, out=so)
    undo()
    a = got["a"]
    peer_o = sym.heap.windows[sym.heap.locate(so)[0]].peers[peer][:count * 4].view(np.float32)
    def bare_ar1():  # one phase: both ranks add the whole vector
        np.add(sx, peer_x, out=so)

    def bare_ar2():  # two phases: reduce our half, copy the peer's reduced half
        np.add(sx[lo:hi], peer_x[lo:hi], out=so[lo:hi])
        np.copyto(so[plo:phi], peer_o[plo:phi])
    t = timeit([lambda: ring.all_reduce(sx, out=so), lambda: orig(*a), bare_ar1, bare_ar2,
                lambda: mpi.all_reduce(px, out=po), lambda: world.Allreduce(px, po, MPI.SUM)], reps)
    row("all_reduce", kib, t[:2] + [min(t[2], t[3])] + t[4:])
    ar_times.append((kib, t))
    if rank == 0:
        print(f"{'':15s} {kib:6d} KiB  bare one phase {t[2]:8.1f} us, two phases {t[3]:8.1f} us", flush=True)

    got, orig, undo = capture(sym, "reduce_scatter")
    ring.reduce_scatter(sx, out=rs_o)
    undo()
    a = got["a"]
    row("reduce_scatter", kib, timeit([lambda: ring.reduce_scatter(sx, out=rs_o), lambda: orig(*a),
                                       lambda: np.add(sx[lo:hi], peer_x[lo:hi], out=rs_o),
                                       lambda: mpi.reduce_scatter(px, out=rs_o),
                                       lambda: world.Reduce_scatter_block(px, rs_o, MPI.SUM)], reps))

    got, orig, undo = capture(sym, "all_gather")
    ring.all_gather(sx, out=sg)
    undo()
    a = got["a"]

    def bare_ag():
        np.copyto(sg[peer * count:(peer + 1) * count], peer_x)
        np.copyto(sg[rank * count:(rank + 1) * count], sx)
    row("all_gather", kib, timeit([lambda: ring.all_gather(sx, out=sg), lambda: orig(*a), bare_ag,
                                   lambda: mpi.all_gather(px, out=pg),
                                   lambda: world.Allgather(px, pg)], reps))
# the memory roofline as bench/collectives.py measures it (rank 0 alone, right after)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
from membw import measure_membw  # noqa: E402  (bench/membw.py)

world.Barrier()
if rank == 0:
    bw = measure_membw()
    print(f"# memory bandwidth (copy, read + write), measured now: {bw:.2f} GB/s", flush=True)
    for kib, t in ar_times:  # busbw of a two-rank all-reduce = bytes / time
        b = [kib * 1024 / (v * 1e-6) / 1e9 for v in t]
        print(f"# all_reduce {kib} KiB busbw GB/s: call {b[0]:.2f} ({b[0] / bw:.0%} of roofline), algo {b[1]:.2f}, "
              f"bare one phase {b[2]:.2f} ({b[2] / bw:.0%}), bare two phases {b[3]:.2f} ({b[3] / bw:.0%}), "
              f"mpi {b[4]:.2f}", flush=True)
world.Barrier()
ring.close()
mpi.close()
