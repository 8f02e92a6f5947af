"""Transports move bytes between two ranks; the algorithms never see MPI.

A transport has ``rank``, ``size`` and four calls:
``isend(buf, peer, tag)`` and ``irecv(buf, peer, tag)`` return a handle;
``test(handle)`` drives progress and says whether it is done; ``cancel``
gives up on handles after an error. ``buf`` is a 1-D contiguous array of
any dtype; it is moved as raw bytes.

Messages between one pair of ranks with one tag are matched in the order
they were posted, as MPI guarantees.

- inproc.py: simulated ranks on threads (tests, teaching);
- mpi.py: MPI point-to-point, for ranks an MPI launcher started;
- gloo.py: torch's Gloo point-to-point, for a store world (torchrun, mp.spawn);
- device/: device (cupy) buffers over any of these.

``MpiTransport`` and ``GlooTransport`` are imported on first use: importing
mpi4py's MPI initialises MPI, which a store world never does.
"""
from .inproc import Fabric, InProcTransport

__all__ = ["Fabric", "GlooTransport", "InProcTransport", "MpiTransport"]


def __getattr__(name: str):
    if name == "MpiTransport":
        from .mpi import MpiTransport
        return MpiTransport
    if name == "GlooTransport":
        from .gloo import GlooTransport
        return GlooTransport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
