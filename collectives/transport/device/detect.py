"""Which device transport mode every rank uses: CUDA-aware MPI detection and the choice."""
from __future__ import annotations

import ctypes
import hashlib

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


def _node_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little", signed=True)


def choose_mode(bootstrap, requested: str = "auto") -> str:
    """The mode every rank will use: ``requested``, or for "auto" IPC when all
    ranks share a node, else CUDA-aware MPI when the library has it, else staging.
    In a store world (a bootstrap without MPI) MPI is never asked: IPC or staging.

    "auto" is one allgather over the bootstrap, with its deadline: a rank that
    never joins (say it passed a host array where this one passed a device
    array) makes this raise SetupError instead of hanging.

    Args:
      bootstrap: the ranks' bootstrap (collectives/bootstrap); unused unless "auto".
      requested: "auto" or one of MODES.
    """
    if requested != "auto":
        if requested not in MODES:
            raise ValueError(f"unknown device transport mode {requested!r}; choose from auto, {', '.join(MODES)}")
        return requested
    if bootstrap is None:
        raise ValueError("mode='auto' needs a bootstrap to agree on; pass the mode explicitly")
    from ...bootstrap import host_identity
    aware = cuda_aware_mpi()[0] if getattr(bootstrap, "mpi_comm", None) is not None else False
    every = bootstrap.allgather_obj((_node_key(host_identity()), aware))
    if len({key for key, _ in every}) == 1:  # one node
        return "ipc"
    return "cuda_aware" if all(aware for _, aware in every) else "staged"  # all ranks, or none
