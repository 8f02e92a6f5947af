"""The peers as their users call them, for bench/collectives.py: raw mpi4py and DeepSpeed's
CPU shared-memory all-reduce.

- ``RawMpi`` (``--algorithm mpi``): mpi4py's own calls on the benchmark's buffers,
  written as a user writes them: ``comm.Allreduce(x, out, op=MPI.SUM)``,
  ``Reduce_scatter_block``, ``Allgather``, ``Bcast``, with nothing of ringzero in
  between. (``--algorithm mpi-api`` is MPI behind ringzero's API,
  ``Communicator(algorithm="mpi")``: the difference is what our API costs.)
- ``DeepSpeedShm`` (``--algorithm deepspeed``): DeepSpeed's raw op
  ``torch.ops.deepspeed.inference_all_reduce_(t)``, in place on a CPU tensor over the
  benchmark's output array (SUM of float32, bfloat16 and float16 only; it ignores
  groups and never times out). It needs its C++ op built into the virtualenv
  (``make bench-peers``); where it is not, ``missing`` says how to get it and the
  benchmark prints that instead of a row. The op maps one shared-memory workspace
  per rank and reduces through it when ``LOCAL_SIZE`` equals the world size (set
  here); the workspace names carry this run's id, and are unlinked at the end.

Each ``caller(case, fresh)`` returns the zero-argument call the benchmark times:
one closure layer, the same for every algorithm. ``fresh``: new views ``x[:]`` (and
``out[:]``) on every call, as code that slices or reallocates its buffers passes them.
"""
from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

import numpy as np
from mpi4py import MPI

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
MPI_DTYPES = ("float32", "float64", "int32", "int64")
DS_DTYPES = ("float32", "bfloat16", "float16")
VENV = Path(__file__).resolve().parent.parent / ".venv"
DS_EXT = "deepspeed_shm_comm"
INSTALL = ("make bench-peers (DeepSpeed 0.19.8 from its sdist, pip --no-build-isolation with "
           "DS_ACCELERATOR=cpu, and its shared-memory op built into .venv/torch_extensions, ~1-2 min)")


class RawMpi:
    """mpi4py on a duplicate of ``world``, as the benchmark sees a communicator
    (rank, size, barrier, close, and a caller per case)."""

    name = "mpi"

    def __init__(self, world):
        self.comm = world.Dup()
        self.rank, self.size = self.comm.rank, self.comm.size

    def caller(self, case, fresh: bool):
        c, x, out = self.comm, case.x, case.out
        op = case.op
        if getattr(case, "in_place", False):  # as an mpi4py user writes it: MPI.IN_PLACE
            if op == "all_reduce":
                f, mop = c.Allreduce, MPI_OPS[case.redop]
                return (lambda: f(MPI.IN_PLACE, out[:], op=mop)) if fresh else (lambda: f(MPI.IN_PLACE, out, op=mop))
            if op == "all_gather":
                f = c.Allgather
                return (lambda: f(MPI.IN_PLACE, out[:])) if fresh else (lambda: f(MPI.IN_PLACE, out))
        if op == "all_reduce":
            f, mop = c.Allreduce, MPI_OPS[case.redop]
            return (lambda: f(x[:], out[:], op=mop)) if fresh else (lambda: f(x, out, op=mop))
        if op == "reduce_scatter":
            f, mop = c.Reduce_scatter_block, MPI_OPS[case.redop]
            return (lambda: f(x[:], out[:], op=mop)) if fresh else (lambda: f(x, out, op=mop))
        if op == "all_gather":
            f = c.Allgather
            return (lambda: f(x[:], out[:])) if fresh else (lambda: f(x, out))
        f = c.Bcast  # in place on out: the root's out holds its data (Case.prepare copies it there)
        return (lambda: f(out[:], 0)) if fresh else (lambda: f(out, 0))

    def barrier(self) -> None:
        self.comm.Barrier()

    def close(self) -> None:
        self.comm.Free()


def unsupported_mpi(dtype: str, redop: str) -> str | None:
    """Why raw MPI cannot run this benchmark's dtype or op, or None."""
    if dtype not in MPI_DTYPES:
        return f"raw MPI reduces {', '.join(MPI_DTYPES)} (no {dtype}): use --algorithm mpi-api, ringzero's half types"
    if redop not in MPI_OPS:
        return f"MPI has no {redop} reduction: use --redop sum (mpi-api pre-scales avg as ringzero does)"
    return None


def extension_path() -> Path:
    """Where ``make bench-peers`` builds DeepSpeed's op (TORCH_EXTENSIONS_DIR, else the venv's)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or str(VENV / "torch_extensions")
    return Path(root) / DS_EXT / f"{DS_EXT}.so"


def deepspeed_missing() -> str | None:
    """Why DeepSpeed's op cannot run here (with how to install it), or None."""
    if importlib.util.find_spec("deepspeed") is None:
        return f"DeepSpeed is not installed: {INSTALL}"
    if not extension_path().exists():
        return f"DeepSpeed's shared-memory op is not built at {extension_path()}: {INSTALL}"
    return None


class DeepSpeedShm:
    """DeepSpeed's CPU shared-memory all-reduce (its raw op) over the ranks of ``world``.

    Args:
      world: MPI's world (DeepSpeed's op takes every rank of the node: LOCAL_SIZE = world size).
    """

    name = "deepspeed"

    def __init__(self, world):
        import torch

        self.world, self.torch = world, torch
        self.rank, self.size = world.rank, world.size
        run = world.bcast(f"{os.getpid()}" if world.rank == 0 else None, root=0)
        # one OpenMP thread per rank for its reduction loops, as torchrun and DeepSpeed's own launcher
        # (cores bound per rank) give each rank: more ranks' threads than cores spin against each other
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        spec = importlib.util.spec_from_file_location(DS_EXT, extension_path())
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # registers torch.ops.deepspeed.*
        # initialize() reads these three; MASTER_* name its workspaces (this run's id), and are put
        # back after, so that torch's own rendezvous later in the run is not sent to env://
        env = {"LOCAL_SIZE": str(world.size), "MASTER_ADDR": "ringzero-bench", "MASTER_PORT": run}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            mod.initialize(world.size, world.rank)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.level = mod.vector_kernel_level()
        self.op = torch.ops.deepspeed.inference_all_reduce_
        self._names = f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_ringzero-bench_{run}_*"
        world.Barrier()  # every rank's workspace is mapped before the first call

    def caller(self, case, fresh: bool):
        f, t = self.op, case.tout
        return (lambda: f(t[:])) if fresh else (lambda: f(t))

    def barrier(self) -> None:
        self.world.Barrier()

    def close(self) -> None:
        self.world.Barrier()
        if self.rank == 0:
            for name in glob.glob(self._names):
                try:
                    os.unlink(name)
                except OSError:
                    pass


def as_tensor(torch, a: np.ndarray):
    """A torch tensor sharing ``a``'s memory (bfloat16 through an int16 view)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
