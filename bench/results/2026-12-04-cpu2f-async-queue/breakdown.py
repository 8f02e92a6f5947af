"""Where an async 1 KiB all-reduce's time goes, layer by layer (2 ranks, one launch).

    mpirun -n 2 python bench/results/2026-12-04-cpu2f-async-queue/breakdown.py [--no-wake]

Each row: the median over 5 rounds of the mean time per call of 4000 calls (slowest
rank), the layers taking turns in every round. "queue alone" submits a task that does
nothing and waits on it; "torch's API, async" calls dist.all_reduce(async_op=True) on
a group that does nothing but return a finished torch Work (what torch's Python and
dispatch cost around any backend's async call).

--no-wake is an experiment, not a mode of the library: Engine.submit is replaced by one
that never wakes the progress thread, which is safe here only because every async call
is waited on at once (its waiter runs it, Work.run_here). It shows what the wake-up of
the progress thread costs each async call.
"""
import os
import sys
import time

import numpy as np

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import collectives  # noqa: E402,F401  (before mpi4py starts MPI)
import collectives.work as work  # noqa: E402

if "--no-wake" in sys.argv:
    import threading

    if not hasattr(work, "Engine"):
        sys.exit("--no-wake replaces the Engine of collectives/work.py as of this folder's commit; "
                 "later, COLLECTIVES_ASYNC_GRACE_US (the tuning table) sets when the thread is woken")

    def submit(self, fn, label):
        w = work.Work(label, self)
        with self._lock:
            self._inflight += 1
            self._queue.append((fn, w))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
        return w
    work.Engine.submit = submit
from mpi4py import MPI  # noqa: E402

from torch_groups import init_groups, noop_group  # noqa: E402  (bench/torch_groups.py)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

world = MPI.COMM_WORLD
g = init_groups(world, ringzero=True)["ringzero"]
comm = g.comm
noop = noop_group(world.rank, world.size)


class Done(dist.Work):
    def wait(self, timeout=None):
        return True


done_noop = noop_group(world.rank, world.size)
done_noop.allreduce = lambda tensors, opts=None: Done()
x = np.ones(256, np.float32)
o = np.empty_like(x)
t = torch.ones(256)
layers = {
    "raw MPI Allreduce (blocking)": lambda: world.Allreduce(x, o),
    "Communicator.all_reduce, blocking": lambda: comm.all_reduce(x, out=o),
    "Communicator.all_reduce, async + wait": lambda: comm.all_reduce(x, out=o, async_op=True).wait(),
    "queue alone (no-op task)": lambda: comm.engine.submit(lambda: None, "noop").wait(),
    "dist.all_reduce, blocking": lambda: dist.all_reduce(t, group=g),
    "dist.all_reduce, async + wait": lambda: dist.all_reduce(t, group=g, async_op=True).wait(),
    "torch's API, blocking (no-op group)": lambda: dist.all_reduce(t, group=noop),
    "torch's API, async + wait (no-op group)": lambda: dist.all_reduce(t, group=done_noop, async_op=True).wait(),
}
K = 4000
times = {k: [] for k in layers}
for fn in layers.values():
    for _ in range(300):
        fn()
for rnd in range(5):
    for name, fn in layers.items():
        world.Barrier()
        t0 = time.perf_counter()
        for _ in range(K):
            fn()
        times[name].append(world.allreduce((time.perf_counter() - t0) / K, op=MPI.MAX))
if world.rank == 0:
    print(f"# {world.size} ranks, 1 KiB float32 sum, {K} calls a round, median of 5 rounds (slowest rank)"
          + (", --no-wake" if "--no-wake" in sys.argv else ""))
    for name, v in times.items():
        print(f"{name:42s} {np.median(v) * 1e6:7.2f} us")
dist.destroy_process_group()
