"""torch.distributed process groups for the benchmarks, set up from MPI.

    init_default_gloo(MPI.COMM_WORLD)   # the default group: Gloo, rank and size from MPI
    group = ringzero_group()            # our ring behind torch's ProcessGroup API

Under ``mpirun`` nothing tells torch where its rendezvous store is, so rank 0
starts a TCPStore on a free port and broadcasts (host, port) with mpi4py.
torch is imported here, never by ``import collectives``.
"""
from __future__ import annotations

import datetime
import os
import socket

from mpi4py import MPI


def init_default_gloo(world: MPI.Comm, timeout_s: float = 120.0):
    """Initialise torch.distributed's default group with Gloo, ranks as in ``world``; return the module.

    Does nothing when a default group exists already.

    Args:
      world: the MPI communicator whose ranks the group mirrors.
      timeout_s: deadline for the store rendezvous and for every Gloo collective.

    Unless OMP_NUM_THREADS says otherwise, torch gets one intra-op thread per
    rank, torchrun's default.
    """
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return dist
    if "OMP_NUM_THREADS" not in os.environ:
        # As torchrun does by default: one intra-op thread per rank. More spin in OpenMP after each
        # parallel copy and take the cores the other ranks' (and the other algorithms') polling needs.
        torch.set_num_threads(1)
    hosts = world.allgather(socket.gethostname())
    host = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
    timeout = datetime.timedelta(seconds=timeout_s)
    store, port = None, None
    if world.rank == 0:
        try:  # port 0: the OS picks a free one; rank 0 must not wait for the others before it says which
            store = dist.TCPStore(host, 0, world.size, True, timeout=timeout, wait_for_workers=False)
            port = store.port
        except Exception as e:  # the others must not wait for a port that never comes
            port = f"rank 0 could not start a TCPStore on {host}: {e}"
    port = world.bcast(port, root=0)
    if isinstance(port, str):
        raise RuntimeError(port)
    if store is None:
        store = dist.TCPStore(host, port, world.size, False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size, timeout=timeout)
    return dist


def ringzero_group():
    """A torch process group over ringzero's ring (collectives.torch_backend), same ranks as the default group.

    Raises:
      RuntimeError: this checkout has no collectives.torch_backend.
    """
    import torch.distributed as dist

    try:
        import collectives.torch_backend  # noqa: F401  (registers the "ringzero" backend)
    except ImportError as e:
        raise RuntimeError(f"the ringzero torch backend is not available here ({e}); "
                           "it lives in collectives/torch_backend.py") from e
    return dist.new_group(backend="ringzero")


def have_ringzero_backend() -> bool:
    """Whether collectives.torch_backend exists in this checkout (checked without importing torch)."""
    import importlib.util

    return importlib.util.find_spec("collectives.torch_backend") is not None
