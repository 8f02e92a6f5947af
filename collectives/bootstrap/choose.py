"""Which world a torch backend's process forms, told from its environment before MPI is
touched (importing mpi4py's MPI initialises MPI, about 1.1 s for a singleton here).

- **MPI world**: an MPI launcher started this process and its size variable
  (Open MPI's ``OMPI_COMM_WORLD_SIZE``, Hydra's ``PMI_SIZE``, or PMIx's
  ``PMIX_RANK`` with Slurm's ``SLURM_STEP_NUM_TASKS``: ``srun --mpi=pmix``)
  agrees with ``WORLD_SIZE``, or ``WORLD_SIZE`` is unset. The ranks meet over
  MPI (bootstrap/mpi.py).
- **store world**: everything else (torchrun, mp.spawn, plain srun, the
  DeepSpeed launcher). The ranks meet over torch's store
  (bootstrap/store.py) and send over Gloo; MPI is never initialised. A
  process torchrun started (``TORCHELASTIC_RUN_ID``) is always here: it
  inherits the variables of an mpirun that started torchrun, and those count
  torchrun's processes, not these.

``RINGZERO_WORLD`` (the tuning table's ``world``) forces either.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

KINDS = ("mpi", "store")


class World(NamedTuple):
    kind: str  # "mpi" or "store"
    why: str
    launcher: str | None = None  # the MPI launcher's size variable, "NAME=value", when there is one
    size: int | None = None  # its value (None: PMIx without a size variable)


def launcher_size(env: Mapping[str, str]) -> tuple[str, int | None] | None:
    """(variable, size) of the MPI launcher that started this process, or None."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if var in env:
            return var, int(env[var])
    if "PMIX_RANK" in env:
        n = env.get("SLURM_STEP_NUM_TASKS")
        return ("SLURM_STEP_NUM_TASKS", int(n)) if n else ("PMIX_RANK", None)
    return None


def choose_world(env: Mapping[str, str], forced: str = "auto") -> World:
    """The world of a process whose launcher variables are ``env`` (tuning.launcher()).

    Args:
      env: the launcher variables (tuning.LAUNCHER_VARS) that are set.
      forced: "auto", or "mpi" or "store" (RINGZERO_WORLD).
    """
    found = launcher_size(env)
    named = None if found is None or found[1] is None else f"{found[0]}={found[1]}"
    size = None if found is None else found[1]
    if forced in KINDS:
        return World(forced, f"RINGZERO_WORLD={forced}", named, size)
    if forced != "auto":
        raise ValueError(f"RINGZERO_WORLD={forced!r}: choose auto, mpi or store")
    if "TORCHELASTIC_RUN_ID" in env:
        return World("store", "torchrun started this process (TORCHELASTIC_RUN_ID is set)", named, size)
    if found is None:
        return World("store", "no MPI launcher started this process (no OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK)")
    ws = env.get("WORLD_SIZE")
    if ws is None:
        return World("mpi", f"an MPI launcher started this process ({named or found[0]}), WORLD_SIZE is unset",
                     named, size)
    if size is None or int(ws) == size:
        return World("mpi", f"an MPI launcher started this process ({named or found[0]}), WORLD_SIZE={ws} "
                            "agrees", named, size)
    return World("store", f"WORLD_SIZE={ws} differs from the MPI launcher's {named}: another launcher started "
                          "these processes inside it", named, size)


def disagreement(world: World, torch_size: int, mpi_size: int, rank: int) -> str:
    """The error when torch's world and an MPI world differ in size: what happened, what to do."""
    via = world.launcher or "the MPI launcher"
    return (f"ringzero: torch's world has {torch_size} ranks but MPI's has {mpi_size} ({via}; torch rank {rank}). "
            f"Either start {torch_size} processes with the MPI launcher (mpirun -n {torch_size}), or form a store "
            f"world over torch's store instead: launch with torchrun or mp.spawn, or set WORLD_SIZE={torch_size} "
            f"with RANK, MASTER_ADDR and MASTER_PORT on every rank (RINGZERO_WORLD=store forces it)")
