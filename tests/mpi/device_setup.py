"""The device transport's "auto" setup never hangs (run by tests/test_cuda_transport.py).

    mpirun -n 2 python tests/mpi/device_setup.py

1. Both ranks agree: one node, so "ipc", on every rank.
2. Only rank 0 asks (as when rank 1 passed a numpy array to the collective where
   rank 0 passed a cupy one): rank 0 gets CollectiveError after its 1 s deadline,
   naming the setup; rank 1 joins late, so the abandoned agreement completes and
   both exit cleanly. Needs no GPU: the setup is plain MPI.
"""
import time

from mpi4py import MPI

from collectives.errors import CollectiveError
from collectives.transport.device import detect
from collectives.transport.mpi import MpiTransport

world = MPI.COMM_WORLD
r = world.Get_rank()
t = MpiTransport(world)
mode = detect.choose_mode(t, "auto", timeout=30)
print(f"rank {r}: agreed {mode}", flush=True)

t2 = MpiTransport(world)
if r == 0:
    t0 = time.monotonic()
    try:
        detect.choose_mode(t2, "auto", timeout=1.0)
        print("rank 0: NO ERROR", flush=True)
    except CollectiveError as e:
        print(f"rank 0: raised after {time.monotonic() - t0:.1f} s: {e}", flush=True)
    for req, *_ in detect.ABANDONED_SETUPS:
        req.Wait()  # rank 1 joins below
else:
    time.sleep(3.0)
    detect.choose_mode(t2, "auto", timeout=30)
world.Barrier()
print(f"rank {r}: done", flush=True)
