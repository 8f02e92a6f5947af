"""Errors raised by collectives. Each names the rank and what went wrong."""


class CollectiveError(RuntimeError):
    """A collective failed. The communicator is unusable afterwards."""


class MismatchError(CollectiveError):
    """Ranks called collectives that do not agree (op, dtype, count, order)."""


class CollectiveTimeout(CollectiveError):
    """A wait passed its deadline: a peer never sent what this rank expected."""
