"""Transports move bytes between two ranks; the algorithms never see MPI.

A transport has ``rank``, ``size``, a wait ``policy`` (waiting.py) and four calls:
``isend(buf, peer, tag)`` and ``irecv(buf, peer, tag)`` return a handle;
``test(handle)`` drives progress and says whether it is done; ``cancel``
gives up on handles after an error. ``buf`` is a 1-D contiguous array of
any dtype; it is moved as raw bytes.

Messages between one pair of ranks with one tag are matched in the order
they were posted, as MPI guarantees. ``MpiTransport`` is imported on first use:
importing mpi4py starts MPI, which a store world (torchrun) must not do.
"""
from .inproc import Fabric, InProcTransport

__all__ = ["Fabric", "InProcTransport", "MpiTransport"]


def __getattr__(name):
    if name == "MpiTransport":
        from .mpi import MpiTransport
        return MpiTransport
    raise AttributeError(f"module 'collectives.transport' has no attribute {name!r}")
