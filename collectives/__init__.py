"""ringzero collectives: ring reduce-scatter, all-gather and all-reduce over MPI.

    from collectives import Communicator
    comm = Communicator()                      # MPI.COMM_WORLD, our ring
    y = comm.all_reduce(x, op="sum")           # numpy or cupy array
    work = comm.reduce_scatter(g, async_op=True); ...; shard = work.wait()
"""
import os
import sys

# Open MPI 5's UCX one-sided component prints "OSC UCX component priority set
# inside component query failed" on stderr the first time a shared-memory window
# is made (comm.alloc, ZeroOptimizer's buffers); the window itself comes from the
# "sm" component either way. Leave that component out unless the user chose one.
# (Read by MPI_Init: effective when collectives is imported before mpi4py.MPI.)
# MPI started before this import (mpi4py.MPI first) with no choice of the user's: the
# setting comes too late, and staging by default stays off (symmetric.staged), since that
# component once crashed while declining a shared window (docs/symmetric.md).
UCX_OSC_MAYBE_ON = "mpi4py.MPI" in sys.modules and "OMPI_MCA_osc" not in os.environ
os.environ.setdefault("OMPI_MCA_osc", "^ucx")

from .communicator import Communicator
from .errors import CollectiveError, CollectiveTimeout, MismatchError
from .simulate import simulate
from .work import Work

__all__ = ["Communicator", "CollectiveError", "CollectiveTimeout", "MismatchError", "Work", "simulate"]
