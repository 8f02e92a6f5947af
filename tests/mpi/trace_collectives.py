"""Under mpirun: run each collective once with the tracer COLLECTIVES_TRACE asks for.

Each rank writes its Chrome trace at exit (trace.rank{r}.json); the test
compares the bytes in those files with the formulas and with explain.
Usage: COLLECTIVES_TRACE=DIR/trace.json mpirun -n N python trace_collectives.py COUNT
"""
import sys

import numpy as np

from collectives import Communicator
from collectives.teach.trace import tracer_from_env

count = int(sys.argv[1])
tracer = tracer_from_env()
assert tracer is not None, "COLLECTIVES_TRACE is not set"
with Communicator(tracer=tracer, chunk_bytes=4096, small_bytes=0) as comm:  # the ring, not recursive doubling
    n, r = comm.size, comm.rank
    x = np.full(count, 10.0 ** r, np.float32)
    y = comm.all_reduce(x)
    assert (y == sum(10.0 ** i for i in range(n))).all()
    shard = comm.reduce_scatter(x)
    assert shard.size == count // n
    full = comm.all_gather(np.full(count // n, r, np.float32))
    assert full.size == count
    b = comm.broadcast(x.copy(), root=n - 1)
    assert (b == 10.0 ** (n - 1)).all()
print(f"rank {r}: ok")
