"""mpi4py.MPI imported before collectives: staging by default all the same (the heap is
POSIX shared memory, not MPI windows). Prints one line per rank."""
from mpi4py import MPI  # noqa: F401  first, on purpose

import numpy as np  # noqa: E402

from collectives import Communicator  # noqa: E402

comm = Communicator()
x = np.arange(256, dtype=np.float32) + comm.rank
y = comm.all_reduce(x)
exact = np.array_equal(y, sum(np.arange(256, dtype=np.float32) + r for r in range(comm.size)))
print(f"rank {comm.rank} staged={comm.symmetric is not None} road={comm.road_taken()} exact={exact}", flush=True)
comm.close()
