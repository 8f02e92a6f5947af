"""ringzero collectives: ring reduce-scatter, all-gather and all-reduce, and the roads beside them.

    from collectives import Communicator
    comm = Communicator()                      # MPI.COMM_WORLD
    y = comm.all_reduce(x, op="sum")           # numpy or cupy array, or torch tensor
    work = comm.reduce_scatter(g, async_op=True); ...; shard = work.wait()
    comm.road("all_reduce", x)                 # which road that call takes, and why
"""
from .communicator import Communicator
from .errors import CollectiveError, CollectiveTimeout, MismatchError, RoadError, SetupError, SharedMemoryError
from .roads import Road
from .teach.simulate import simulate
from .work import Work

__all__ = ["Communicator", "CollectiveError", "CollectiveTimeout", "MismatchError", "Road", "RoadError",
           "SetupError", "SharedMemoryError", "Work", "simulate"]
