"""The torch.distributed backend "ringzero": registration, the world, and the rendezvous.

Usage, under any launcher (mpirun, torchrun, mp.spawn, srun)::

    import collectives.torch_backend  # registers "ringzero"
    dist.init_process_group(backend="ringzero")

Which world the processes form is told from the environment before MPI is
touched (bootstrap/choose.py): under an MPI launcher whose size agrees with
WORLD_SIZE (or WORLD_SIZE unset), MPI's; otherwise (torchrun, mp.spawn, plain
srun) a store world over the store torch hands the backend, with Gloo
between ranks, never initialising MPI. worlds.py builds each group's
Communicator in either.

torch insists on a store even for a backend that does not need one. When
``MASTER_ADDR``/``MASTER_PORT`` are not set, the ``env://`` rendezvous (torch's
default) is answered from MPI in an MPI world (rank 0 opens a TCPStore on a
free port and broadcasts its address), and by a store in this process for a
world of one rank started by no launcher. Explicit ``rank``, ``world_size``,
``init_method`` or ``store`` work as usual; a world size that disagrees with
MPI's is an error at once, saying what to do.
"""
from __future__ import annotations

import importlib
import socket
import urllib.parse
from datetime import timedelta

import torch.distributed as dist

from .. import tuning
from ..bootstrap.choose import choose_world, disagreement
from .group import RingzeroProcessGroup
from .worlds import mpi_group, store_group

_rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module; dist.rendezvous is a function

BACKEND = "ringzero"
_MASTER_VARS = ("MASTER_ADDR", "MASTER_PORT")
_state: dict = {}  # "world": the default group's World; "mpi": its MPI communicator (an MPI world)


def world():
    """The world this process forms now (bootstrap/choose.py's World), from its environment."""
    return choose_world(tuning.launcher(), tuning.load().world)


def create_process_group(opts, backend_options=None) -> RingzeroProcessGroup:
    """The creator torch calls (``extended_api=True``) for every group of this backend.

    Args:
      opts: torch's ``_DistributedBackendOptions`` (store, group_rank, group_size,
        timeout, group_id, global_ranks_in_group; empty for the default group).
      backend_options: unused.
    """
    rank, size, ranks = opts.group_rank, opts.group_size, list(opts.global_ranks_in_group)
    timeout = opts.timeout.total_seconds() if isinstance(opts.timeout, timedelta) else float(opts.timeout)
    if not ranks or "world" not in _state:
        _state["world"] = world()
    w = _state["world"]
    if w.kind == "mpi":
        comm, wire = mpi_group(_state, w, rank, size, ranks, opts.group_id, timeout)
    else:
        comm, wire = store_group(opts.store, rank, size, opts.group_id, timeout)
    return RingzeroProcessGroup(comm, wire)


def _rendezvous(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs):
    """torch's env:// rendezvous, answered here when MASTER_ADDR/MASTER_PORT are unset:
    from MPI in an MPI world, by a store in this process for a world of one."""
    env = tuning.launcher()
    if all(env.get(v) for v in _MASTER_VARS):
        yield from _ENV_HANDLER(url, timeout=timeout, **kwargs)
        return
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
    w = world()
    if w.kind == "mpi":
        yield from _mpi_rendezvous(w, query, timeout)
        return
    if int(query.get("world_size", env.get("WORLD_SIZE", 1))) == 1 and int(query.get("rank", env.get("RANK", 0))) == 0:
        yield dist.HashStore(), 0, 1  # one rank, no launcher: nobody to meet
        return
    yield from _ENV_HANDLER(url, timeout=timeout, **kwargs)  # torch says what it misses


def _mpi_rendezvous(w, query: dict, timeout: timedelta):
    from mpi4py import MPI

    from torch.distributed import TCPStore

    everyone = MPI.COMM_WORLD
    env = tuning.launcher()
    size = int(query.get("world_size", env.get("WORLD_SIZE", everyone.Get_size())))
    if size != everyone.Get_size():
        raise ValueError(disagreement(w, size, everyone.Get_size(), everyone.Get_rank()))
    rank = int(query.get("rank", env.get("RANK", everyone.Get_rank())))
    ranks = everyone.allgather(rank)
    if sorted(ranks) != list(range(size)):
        raise ValueError(f"ringzero: the ranks given ({ranks}, by MPI rank) are not 0..{size - 1}")
    root = ranks.index(0)
    host, port, store = socket.gethostname(), 0, None
    if everyone.Get_rank() == root:
        store = TCPStore("0.0.0.0", 0, size, True, timeout=timeout, wait_for_workers=False)
        port = store.port
    host, port = everyone.bcast((host, port), root=root)
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
    # torch's default init_method is env://; without MASTER_* it would refuse (see _rendezvous)
    if _rdzv._rendezvous_handlers.get("env") is not _rendezvous:
        _rdzv._rendezvous_handlers["env"] = _rendezvous


_ENV_HANDLER = _rdzv._env_rendezvous_handler
_register()

__all__ = ["BACKEND", "RingzeroProcessGroup", "alloc", "create_process_group", "world"]
