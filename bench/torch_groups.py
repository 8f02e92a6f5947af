"""torch.distributed process groups for the benchmarks, set up from MPI.

    groups = init_groups(MPI.COMM_WORLD, ringzero=True)   # {"ringzero": group, "gloo": group}
    init_default_gloo(MPI.COMM_WORLD)                     # Gloo alone, as the default group

Under ``mpirun`` nothing tells torch where its rendezvous store is, so rank 0
starts a TCPStore on a free port and broadcasts (host, port) with mpi4py
(ringzero's backend does the same for itself).
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


def init_groups(world: MPI.Comm, ringzero: bool, timeout_s: float = 120.0) -> dict:
    """torch process groups over the ranks of ``world``: {"gloo": group} and, if asked, {"ringzero": group}.

    With ringzero, the default group is ringzero's (collectives.torch_backend
    sets its store up from MPI; its subgroups hang off the default one) and
    Gloo gets a group of its own over the same ranks; without, the default
    group is Gloo's (:func:`init_default_gloo`).

    Args:
      world: the MPI communicator whose ranks the groups mirror (its size must be MPI's world size).
      ringzero: also make a ringzero group.
      timeout_s: deadline for the rendezvous and every collective.

    Raises:
      RuntimeError: ringzero asked for and this checkout has no collectives.torch_backend.
    """
    if not ringzero:
        return {"gloo": init_default_gloo(world, timeout_s).group.WORLD}
    import torch
    import torch.distributed as dist

    try:
        import collectives.torch_backend  # noqa: F401  (registers the "ringzero" backend)
    except ImportError as e:
        raise RuntimeError(f"the ringzero torch backend is not available here ({e}); "
                           "it lives in collectives/torch_backend.py") from e
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # as in init_default_gloo
    timeout = datetime.timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        dist.init_process_group(backend="ringzero", timeout=timeout)
    if dist.get_backend() != "ringzero":
        raise RuntimeError(f"the default torch group is {dist.get_backend()!r}, not ringzero: "
                           "make the groups with init_groups before any other")
    return {"ringzero": dist.group.WORLD, "gloo": dist.new_group(backend="gloo", timeout=timeout)}


def have_ringzero_backend() -> bool:
    """Whether collectives.torch_backend exists in this checkout (checked without importing torch)."""
    import importlib.util

    return importlib.util.find_spec("collectives.torch_backend") is not None


def noop_group(rank: int, size: int):
    """A torch ProcessGroup whose collectives do nothing and return None ("finished").

    ``dist.all_reduce(t, group=noop_group(r, n))`` (and ``dist.broadcast``: the group is
    entered in torch's map of group ranks, ranks as in the world) costs what torch's own API costs
    (argument checks, options, dispatch to the group's method), which every backend
    pays: the floor under the ringzero group's per-call overhead (bench/collectives.py
    --algorithm torch measures it beside the real call).
    """
    import torch.distributed as dist

    class NoopGroup(dist.ProcessGroup):
        def allreduce(self, tensors, opts=None):
            return None

        def all_gather_single(self, output, input, opts=None):
            return None

        def reduce_scatter_single(self, output, input, opts=None):
            return None

        def broadcast(self, tensors, opts=None):
            return None

        _allgather_base = all_gather_single
        _reduce_scatter_base = reduce_scatter_single

    g = NoopGroup(rank, size)
    try:  # known to torch's registry, as a group made by new_group is: dist.broadcast asks it for
        # the root's rank in the group (the map drops it at destroy_process_group)
        from torch.distributed import distributed_c10d as c10d
        c10d._world.pg_group_ranks[g] = {q: q for q in range(size)}
    except (ImportError, AttributeError):  # a torch without the map: its broadcast has no floor row
        pass
    return g
