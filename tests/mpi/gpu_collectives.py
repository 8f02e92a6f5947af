"""Every collective on cupy arrays under mpirun, through one device transport mode.

    mpirun -n N python tests/mpi/gpu_collectives.py MODE      (MODE: ipc, staged, auto)

Ranks share the GPUs round-robin (several per GPU when N exceeds them).
Inputs are integer-valued so any summation order is exact; prints OK.
"""
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

from collectives import Communicator
from collectives.dtypes import bfloat16
from collectives.transport.device import make_device_transport
from collectives.transport.mpi import MpiTransport

mode = sys.argv[1]
world = MPI.COMM_WORLD
r, n = world.Get_rank(), world.Get_size()
cp.cuda.Device(r % cp.cuda.runtime.getDeviceCount()).use()
dt_host = make_device_transport(MpiTransport(world), mode)
comm = Communicator(transport=dt_host, timeout=60, chunk_bytes=64 * 1024)
for dtype in (np.float32, np.float64, np.int32, np.int64, np.float16, bfloat16):
    for count in (0, 1, 1000 + 3, 1 << 20):
        base = (np.arange(count) % 13).astype(np.float32)
        x = cp.asarray((base * (r + 1)).astype(dtype))
        got = comm.all_reduce(x)
        want = (base * (n * (n + 1) // 2)).astype(dtype)
        assert np.array_equal(cp.asnumpy(got).astype(np.float64), want.astype(np.float64)), (dtype, count)
        got = comm.all_reduce(cp.asarray(np.full(count, r, dtype)), op="max")
        assert (cp.asnumpy(got).astype(np.float64) == n - 1).all()
        counts = [count // n + (i < count % n) for i in range(n)]
        rs = comm.reduce_scatter(x, counts=counts)
        off = sum(counts[:r])
        assert np.array_equal(cp.asnumpy(rs).astype(np.float64), want[off:off + counts[r]].astype(np.float64))
        ag = comm.all_gather(cp.asarray(np.full(counts[r], r, dtype)), counts=counts)
        assert np.array_equal(cp.asnumpy(ag).astype(np.float64), np.repeat(np.arange(n), counts).astype(np.float64))
        bc = comm.broadcast(cp.asarray(np.full(count, r, dtype)), root=n - 1)
        assert (cp.asnumpy(bc).astype(np.float64) == n - 1).all()
cp.cuda.Stream.null.synchronize()
comm.close()
dt_host.close()
print(f"rank {r}: OK mode={dt_host.mode}", flush=True)
