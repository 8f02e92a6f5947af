"""Which device transport mode every rank uses: CUDA-aware MPI detection and the choice."""
from __future__ import annotations

import ctypes

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


def choose_mode(host_transport, requested: str = "auto") -> str:
    """The mode every rank will use: ``requested``, or for "auto" IPC when all
    ranks share a node, else CUDA-aware MPI when the library has it, else staging."""
    if requested != "auto":
        if requested not in MODES:
            raise ValueError(f"unknown device transport mode {requested!r}; choose from auto, {', '.join(MODES)}")
        return requested
    comm = getattr(host_transport, "comm", None)
    if comm is None:
        raise ValueError("mode='auto' needs an MPI transport (with .comm); pass the mode explicitly")
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    one_node = node.Get_size() == comm.Get_size()  # the same answer on every rank
    node.Free()
    aware = comm.allreduce(int(cuda_aware_mpi()[0]), op=MPI.MIN)  # all ranks, or none
    if one_node:
        return "ipc"
    return "cuda_aware" if aware else "staged"


