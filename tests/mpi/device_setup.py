"""The device transport's "auto" setup never hangs (run by tests/test_cuda_transport.py).

    mpirun -n 2 python tests/mpi/device_setup.py

1. Both ranks agree: one node, so "ipc", on every rank.
2. Only rank 0 asks (as when rank 1 passed a numpy array to the collective where
   rank 0 passed a cupy one): rank 0 gets SetupError after its bootstrap's 1 s
   deadline, naming the setup step; rank 1 joins late, so the abandoned exchange
   completes and both exit cleanly. Needs no GPU: the setup is the bootstrap's.
"""
import time

from mpi4py import MPI

from collectives.bootstrap.mpi import ABANDONED, MpiBootstrap
from collectives.errors import CollectiveError
from collectives.transport.device import detect

world = MPI.COMM_WORLD
r = world.Get_rank()
mode = detect.choose_mode(MpiBootstrap(world, timeout=30), "auto")
print(f"rank {r}: agreed {mode}", flush=True)

if r == 0:
    t0 = time.monotonic()
    try:
        detect.choose_mode(MpiBootstrap(world, timeout=1.0), "auto")
        print("rank 0: NO ERROR", flush=True)
    except CollectiveError as e:
        print(f"rank 0: raised after {time.monotonic() - t0:.1f} s: {e}", flush=True)
    for req, _ in ABANDONED:
        req.Wait()  # rank 1 joins below
else:
    time.sleep(3.0)
    detect.choose_mode(MpiBootstrap(world, timeout=30), "auto")  # meets rank 0's abandoned exchange
world.Barrier()
print(f"rank {r}: done", flush=True)
