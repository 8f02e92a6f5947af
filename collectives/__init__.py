"""ringzero collectives: ring reduce-scatter, all-gather and all-reduce over MPI.

    from collectives import Communicator
    comm = Communicator()                      # MPI.COMM_WORLD, our ring
    y = comm.all_reduce(x, op="sum")           # numpy or cupy array
    work = comm.reduce_scatter(g, async_op=True); ...; shard = work.wait()
"""
from .communicator import Communicator
from .errors import CollectiveError, CollectiveTimeout, MismatchError
from .simulate import simulate
from .work import Work

__all__ = ["Communicator", "CollectiveError", "CollectiveTimeout", "MismatchError", "Work", "simulate"]
