"""The torch.distributed backend "ringzero": registration, and a store set up from MPI.

Usage, under ``mpirun``::

    import collectives.torch_backend  # registers "ringzero"
    dist.init_process_group(backend="ringzero")

Rank and world size come from MPI. torch insists on a store even for a
backend that does not need one: when ``MASTER_ADDR``/``MASTER_PORT`` are not
set, the ``env://`` rendezvous (torch's default) is answered from MPI
instead: rank 0 opens a TCPStore on a free port and broadcasts its address.
Explicit ``rank``, ``world_size``, ``init_method`` or ``store`` work as
usual; a world size that disagrees with MPI's is an error at once.

Every group (the default one, ``dist.new_group``, each dimension of a
DeviceMesh) gets its own MPI communicator (``Create_group`` over the
group's ranks, called only by those ranks, as torch calls the creator) and
its own Communicator.
"""
from __future__ import annotations

import importlib
import os
import socket
import urllib.parse
import zlib
from datetime import timedelta

import torch.distributed as dist

from ..communicator import Communicator
from .group import RingzeroProcessGroup

_rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module; dist.rendezvous is a function

BACKEND = "ringzero"
_MASTER_VARS = ("MASTER_ADDR", "MASTER_PORT")
_state: dict = {}  # "world": the default group's MPI communicator, ranks in torch's order


def create_process_group(opts, backend_options=None) -> RingzeroProcessGroup:
    """The creator torch calls (``extended_api=True``) for every group of this backend.

    Args:
      opts: torch's ``_DistributedBackendOptions`` (group_rank, group_size,
        timeout, group_id, global_ranks_in_group; empty for the default group).
      backend_options: unused.
    """
    from mpi4py import MPI

    from ..bootstrap.mpi import MpiBootstrap

    rank, size, ranks = opts.group_rank, opts.group_size, list(opts.global_ranks_in_group)
    timeout = opts.timeout.total_seconds() if isinstance(opts.timeout, timedelta) else float(opts.timeout)
    if not ranks:
        world = MPI.COMM_WORLD
        if world.Get_size() != size:
            raise ValueError(f"ringzero: torch world size is {size} but MPI has {world.Get_size()} ranks "
                             f"(mpirun -n {world.Get_size()}); they must agree (torch rank {rank})")
        comm = world.Split(0, rank)  # torch's rank order, whatever MPI's is
        _state["world"] = comm
    else:
        parent = _state.get("world")
        if parent is None:
            raise RuntimeError("ringzero: a subgroup before the default group was created")
        if len(ranks) != size or ranks[rank] != parent.Get_rank():
            raise ValueError(f"ringzero: group {opts.group_id!r} ranks {ranks} do not hold this process "
                             f"(global rank {parent.Get_rank()}) at group rank {rank}")
        tag = zlib.crc32(str(opts.group_id).encode()) % 32768
        comm = parent.Create_group(parent.Get_group().Incl(ranks), tag)
    if comm.Get_rank() != rank or comm.Get_size() != size:
        raise RuntimeError(f"ringzero: MPI communicator is rank {comm.Get_rank()}/{comm.Get_size()}, "
                           f"torch expects {rank}/{size}")
    return RingzeroProcessGroup(Communicator(bootstrap=MpiBootstrap(comm), timeout=timeout), comm)


def _mpi_rendezvous(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs):
    """torch's env:// rendezvous, answered from MPI when MASTER_ADDR/MASTER_PORT are unset."""
    if all(os.environ.get(v) for v in _MASTER_VARS):
        yield from _ENV_HANDLER(url, timeout=timeout, **kwargs)
        return
    from mpi4py import MPI

    from torch.distributed import TCPStore

    world = MPI.COMM_WORLD
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
    size = int(query.get("world_size", os.environ.get("WORLD_SIZE", world.Get_size())))
    if size != world.Get_size():
        raise ValueError(f"ringzero: world_size={size} but MPI has {world.Get_size()} ranks "
                         f"(MPI rank {world.Get_rank()}); they must agree")
    rank = int(query.get("rank", os.environ.get("RANK", world.Get_rank())))
    ranks = world.allgather(rank)
    if sorted(ranks) != list(range(size)):
        raise ValueError(f"ringzero: the ranks given ({ranks}, by MPI rank) are not 0..{size - 1}")
    root = ranks.index(0)
    host, port, store = socket.gethostname(), 0, None
    if world.Get_rank() == root:
        store = TCPStore("0.0.0.0", 0, size, True, timeout=timeout, wait_for_workers=False)
        port = store.port
    host, port = world.bcast((host, port), root=root)
    if store is None:
        addr = "127.0.0.1" if host == socket.gethostname() else host
        store = TCPStore(addr, port, size, False, timeout=timeout)
    yield store, rank, size
    raise RuntimeError("ringzero: the MPI rendezvous cannot run twice in one init")


def alloc(shape, dtype=None, group=None):
    """A CPU tensor in the symmetric heap of a ringzero group's node: the group's
    collectives on such tensors read peers' memory directly (docs/symmetric.md),
    with no copy in. A collective call: every rank of the group calls it with the
    same shapes in the same order, and passes heap tensors on every rank. The
    tensor lives until the group is destroyed.

    Args:
      shape: the tensor's shape.
      dtype: a torch dtype of the dtype table (collectives/dtypes.py); float32 by default.
      group: a ringzero process group (default: the default group).
    """
    import torch

    pg = group if group is not None else dist.group.WORLD
    if not isinstance(pg, RingzeroProcessGroup):
        try:
            pg = pg._get_backend(torch.device("cpu"))
        except (AttributeError, RuntimeError):
            pass
    if not isinstance(pg, RingzeroProcessGroup):
        raise TypeError(f"ringzero.alloc: {group or 'the default group'!r} is not a ringzero process group "
                        f"(init_process_group(backend=\"ringzero\"))")
    return pg.comm.alloc(shape, torch.float32 if dtype is None else dtype)


def _register() -> None:
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create_process_group, extended_api=True, devices=["cpu", "cuda"])
    # torch's default init_method is env://; without MASTER_* it would refuse, so MPI answers
    if _rdzv._rendezvous_handlers.get("env") is not _mpi_rendezvous:
        _rdzv._rendezvous_handlers["env"] = _mpi_rendezvous


_ENV_HANDLER = _rdzv._env_rendezvous_handler
_register()

__all__ = ["BACKEND", "RingzeroProcessGroup", "alloc", "create_process_group"]
