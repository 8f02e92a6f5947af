"""A group's Communicator and wire in each of the two worlds (bootstrap/choose.py says which).

- MPI world: every group gets its own MPI communicator (the default group a
  split of COMM_WORLD in torch's rank order; every other ``Create_group`` over
  its ranks, called only by those ranks, as torch calls the creator), its
  bootstrap over it, and MPI's own calls as its wire.
- store world: every group gets a StoreBootstrap over the store torch hands
  the creator (under a prefix of the group's own), its ring over Gloo
  point-to-point, and a second Gloo group on the same store as its wire. MPI is
  never initialised.
"""
from __future__ import annotations

import zlib

from ..bootstrap.choose import World, disagreement
from ..communicator import Communicator
from .wires import GlooWire, MpiWire


def mpi_group(state: dict, world: World, rank: int, size: int, ranks: list, group_id, timeout: float):
    """(Communicator, MpiWire) of a group in an MPI world; ``state["mpi"]`` keeps the
    default group's communicator, the parent of every other."""
    from mpi4py import MPI

    from ..bootstrap.mpi import MpiBootstrap

    if not ranks:
        everyone = MPI.COMM_WORLD
        if everyone.Get_size() != size:
            raise ValueError(disagreement(world, size, everyone.Get_size(), rank))
        comm = everyone.Split(0, rank)  # torch's rank order, whatever MPI's is
        state["mpi"] = comm
    else:
        parent = state.get("mpi")
        if parent is None:
            raise RuntimeError("ringzero: a subgroup before the default group was created")
        if len(ranks) != size or ranks[rank] != parent.Get_rank():
            raise ValueError(f"ringzero: group {group_id!r} ranks {ranks} do not hold this process "
                             f"(global rank {parent.Get_rank()}) at group rank {rank}")
        tag = zlib.crc32(str(group_id).encode()) % 32768
        comm = parent.Create_group(parent.Get_group().Incl(ranks), tag)
    if comm.Get_rank() != rank or comm.Get_size() != size:
        raise RuntimeError(f"ringzero: MPI communicator is rank {comm.Get_rank()}/{comm.Get_size()}, "
                           f"torch expects {rank}/{size}")
    return Communicator(bootstrap=MpiBootstrap(comm), timeout=timeout), MpiWire(comm, timeout)


def store_group(store, rank: int, size: int, group_id, timeout: float):
    """(Communicator, GlooWire) of a group in a store world, over ``store`` (torch's, for this group)."""
    import torch.distributed as dist

    from ..bootstrap.store import StoreBootstrap

    prefix = f"ringzero/{group_id}"
    comm = Communicator(bootstrap=StoreBootstrap(store, rank, size, timeout, prefix), timeout=timeout)
    try:
        wire = GlooWire(dist.PrefixStore(prefix + "/calls/", store), rank, size, timeout)
    except BaseException:
        comm.close()
        raise
    return comm, wire
