"""Which device transport mode every rank uses: CUDA-aware MPI detection and the choice."""
from __future__ import annotations

import ctypes
import hashlib
import time

import numpy as np

from ...errors import CollectiveError

MODES = ("cuda_aware", "ipc", "staged")


def cuda_aware_mpi() -> tuple[bool, str]:
    """Does the loaded MPI library accept device pointers? (answer, reason)

    Asks Open MPI's MPIX_Query_cuda_support or MPICH's
    MPIX_GPU_query_support in the libmpi this process loaded.
    """
    try:
        from mpi4py import MPI  # noqa: F401  (loads libmpi)
    except ImportError as e:
        return False, f"no mpi4py: {e}"
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "libmpi" in line and ".so" in line})
    except OSError as e:
        return False, f"cannot list loaded libraries: {e}"
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "MPIX_Query_cuda_support"):
            ok = bool(lib.MPIX_Query_cuda_support())
            return ok, f"MPIX_Query_cuda_support() = {int(ok)} in {path}"
        if hasattr(lib, "MPIX_GPU_query_support"):
            flag = ctypes.c_int(0)
            if lib.MPIX_GPU_query_support(ctypes.c_int(0), ctypes.byref(flag)) == 0:  # 0: MPIX_GPU_SUPPORT_CUDA
                return bool(flag.value), f"MPIX_GPU_query_support(CUDA) = {flag.value} in {path}"
    return False, "the MPI library has no CUDA support query; assuming host-only"


SETUP_TIMEOUT = 60.0  # seconds every rank has to join the mode agreement
ABANDONED_SETUPS: list = []  # (request, buffers) of agreements that timed out: MPI may still write them


def _node_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little", signed=True)


def choose_mode(host_transport, requested: str = "auto", timeout: float = SETUP_TIMEOUT) -> str:
    """The mode every rank will use: ``requested``, or for "auto" IPC when all
    ranks share a node, else CUDA-aware MPI when the library has it, else staging.

    "auto" is one non-blocking all-gather (node name, CUDA-aware flag) with a
    deadline: a rank that never joins (say it passed a host array where this
    one passed a device array) makes this raise CollectiveError after
    ``timeout`` seconds instead of hanging.

    Args:
      host_transport: the transport whose ``comm`` the ranks agree on.
      requested: "auto" or one of MODES.
      timeout: seconds to wait for every rank.
    """
    if requested != "auto":
        if requested not in MODES:
            raise ValueError(f"unknown device transport mode {requested!r}; choose from auto, {', '.join(MODES)}")
        return requested
    comm = getattr(host_transport, "comm", None)
    if comm is None:
        raise ValueError("mode='auto' needs an MPI transport (with .comm); pass the mode explicitly")
    from mpi4py import MPI
    mine = np.array([_node_key(MPI.Get_processor_name()), int(cuda_aware_mpi()[0])], np.int64)
    every = np.zeros((comm.Get_size(), 2), np.int64)
    req = comm.Iallgather(mine, every)
    deadline = time.monotonic() + timeout
    while not req.Test():
        if time.monotonic() > deadline:
            ABANDONED_SETUPS.append((req, mine, every))
            raise CollectiveError(
                f"rank {comm.Get_rank()}: device transport setup: not every rank joined the mode agreement "
                f"within {timeout:g} s (does another rank pass a host array where this one passes a device "
                f"array, or call a different collective?)")
        time.sleep(0.0002)
    if len(set(every[:, 0].tolist())) == 1:  # the same answer on every rank
        return "ipc"
    return "cuda_aware" if every[:, 1].min() == 1 else "staged"  # all ranks, or none
