"""mpi4py.MPI imported before collectives: the default staging decision (symmetric.staged).

Launched with OMPI_MCA_osc unset, MPI starts with Open MPI's UCX one-sided
component in, which once crashed while declining a shared window: staging by
default must stay off, and the call still right (the ring). With the variable
set by the user, staging goes on as usual. Prints one line per rank.
"""
from mpi4py import MPI  # noqa: F401  first, on purpose

import numpy as np  # noqa: E402

import collectives  # noqa: E402
from collectives import Communicator  # noqa: E402

comm = Communicator()
x = np.arange(256, dtype=np.float32) + comm.rank
y = comm.all_reduce(x)
exact = np.array_equal(y, sum(np.arange(256, dtype=np.float32) + r for r in range(comm.size)))
print(f"rank {comm.rank} maybe_on={collectives.UCX_OSC_MAYBE_ON} staged={comm._symmetric is not None} "
      f"exact={exact}", flush=True)
comm.close()
