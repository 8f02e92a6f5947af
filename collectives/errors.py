"""Errors raised by collectives. Each names the rank and what went wrong."""


class CollectiveError(RuntimeError):
    """A collective failed. The communicator is unusable afterwards."""


class MismatchError(CollectiveError):
    """Ranks called collectives that do not agree (op, dtype, count, order)."""


class CollectiveTimeout(CollectiveError):
    """A wait passed its deadline: a peer never sent what this rank expected."""


class SetupError(CollectiveError):
    """A setup step (a split, a shared-memory segment, a probe, a mapping) failed on some
    rank; every rank of the step raises it, with the same account of who failed and why."""


class SharedMemoryError(SetupError):
    """The node's shared memory cannot hold what the heap asked for."""


class RoadError(ValueError):
    """A forced road (roads.py) cannot serve this call; the message says why."""
