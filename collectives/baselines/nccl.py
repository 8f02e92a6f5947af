"""The nccl road: NCCL through ``cupy.cuda.nccl``, behind the Communicator's API.

One NCCL communicator per Communicator, built at construction (the unique
id travels over the bootstrap from rank 0), on each rank's current device. Every call
goes on the device's default stream, the one the CUDA kernel set and the
device transport use, so results are ordered like the ring's. avg arrives
here as sum: dispatch.py pre-scales floats and divides integers afterwards,
for every algorithm alike (ncclAvg would round differently). Uneven counts, which ncclReduceScatter / ncclAllGather cannot take,
become a group of per-rank ncclReduce / ncclBroadcast calls.

NCCL refuses two ranks on one GPU; that case fails here, on every rank,
with a message saying so, instead of inside NCCL.
"""
from __future__ import annotations

from ..dtypes import info
from ..kernels import is_device_array
from ..host.schedule import offsets

_BFLOAT16_CODE = 9  # ncclBfloat16 in nccl.h, for cupy builds without the constant
_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}


def _import_nccl():
    try:
        import cupy
        from cupy.cuda import nccl
    except ImportError as e:
        raise RuntimeError(f"algorithm='nccl' needs cupy with NCCL: pip install 'ringzero[gpu]' ({e})") from e
    if not getattr(nccl, "available", True):
        raise RuntimeError("algorithm='nccl': cupy was built without NCCL support; "
                           "install the nvidia-nccl wheel of the driver's CUDA major, e.g. nvidia-nccl-cu13 "
                           "(pip install 'ringzero[gpu]'; 'ringzero[gpu-cuda12]' for CUDA 12)")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
    except Exception as e:
        raise RuntimeError(f"algorithm='nccl' needs a CUDA device: {e}") from e
    return cupy, nccl


class NcclAlgorithm:
    """NCCL collectives over the ranks of a bootstrap.

    Args:
      bootstrap: the Communicator's bootstrap: it carries the NCCL unique id and the
        one-GPU-per-rank check.
    """

    def __init__(self, bootstrap):
        if bootstrap is None:
            raise ValueError("algorithm='nccl' needs a bootstrap (ranks started by a launcher)")
        cp, nccl = _import_nccl()
        self.cp, self.nccl = cp, nccl
        self.size, self.rank = bootstrap.size, bootstrap.rank
        self.device = cp.cuda.Device().id
        import socket
        where = bootstrap.allgather_obj((socket.gethostname(), cp.cuda.Device(self.device).pci_bus_id))
        if len(set(where)) < len(where):
            raise RuntimeError(f"rank {self.rank}: NCCL cannot run several ranks on one GPU "
                               f"(rank -> (host, GPU): {dict(enumerate(where))}); "
                               "use algorithm='ring', which shares a GPU through CUDA IPC")
        uid = bootstrap.broadcast_obj(nccl.get_unique_id() if self.rank == 0 else None)
        with cp.cuda.Device(self.device):
            self.nccl_comm = nccl.NcclCommunicator(self.size, uid, self.rank)

    # ------------------------------------------------------------ helpers
    def _dtype(self, x) -> int:
        """NCCL's type for x's dtype (the table's ``nccl`` column), or TypeError."""
        row = info(x.dtype)
        code = getattr(self.nccl, row.nccl, None) if row.nccl is not None else None
        if code is None and row.name == "bfloat16":
            code = _BFLOAT16_CODE
        if code is None:
            raise TypeError(f"rank {self.rank}: algorithm='nccl' has no NCCL type for dtype {row.name}")
        return code

    def _op(self, op: str, x) -> int:
        name = _OPS.get(op)
        if name is None:
            raise TypeError(f"rank {self.rank}: algorithm='nccl' has no op {op!r} for dtype {info(x.dtype).name} "
                            f"(NCCL reduces with {', '.join(_OPS)})")
        return getattr(self.nccl, name)

    def _check(self, *arrays) -> None:
        for a in arrays:
            if not is_device_array(a):
                raise TypeError("algorithm='nccl' works on cupy arrays only; use 'ring' or 'mpi' for numpy")

    def _stream(self) -> int:
        return self.cp.cuda.Stream.null.ptr

    # --------------------------------------------------------- collectives
    def all_reduce(self, x, out, op: str) -> None:
        self._check(x, out)
        with self.cp.cuda.Device(self.device):
            if x.size:
                self.nccl_comm.allReduce(x.data.ptr, out.data.ptr, x.size, self._dtype(x), self._op(op, x),
                                         self._stream())

    def reduce_scatter(self, x, out, counts: list[int], op: str) -> None:
        self._check(x, out)
        dt, nop, s = self._dtype(x), self._op(op, x), self._stream()
        item = x.dtype.itemsize
        with self.cp.cuda.Device(self.device):
            if len(set(counts)) == 1:
                if counts[0]:
                    self.nccl_comm.reduceScatter(x.data.ptr, out.data.ptr, counts[0], dt, nop, s)
            else:
                def reduce_to(root, c, off):  # only the root's receive pointer is used
                    recv = out.data.ptr if root == self.rank else x.data.ptr + off * item
                    self.nccl_comm.reduce(x.data.ptr + off * item, recv, c, dt, nop, root, s)
                self._per_root(counts, reduce_to)

    def all_gather(self, x, out, counts: list[int], in_place: bool = False) -> None:
        """``in_place`` (x is out's own segment) needs nothing here: NCCL sees it in the pointers."""
        self._check(x, out)
        dt, s, item = self._dtype(x), self._stream(), x.dtype.itemsize
        with self.cp.cuda.Device(self.device):
            if len(set(counts)) == 1:
                if counts[0]:
                    self.nccl_comm.allGather(x.data.ptr, out.data.ptr, counts[0], dt, s)
                return
            def broadcast_from(root, c, off):
                send = x.data.ptr if root == self.rank else out.data.ptr + off * item
                self.nccl_comm.broadcast(send, out.data.ptr + off * item, c, dt, root, s)
            self._per_root(counts, broadcast_from)

    def _per_root(self, counts: list[int], call) -> None:
        """Uneven counts: one NCCL call per non-empty segment, ``call(root, count, offset)``,
        in one NCCL group so they run as a single collective."""
        offs = offsets(counts)
        self.nccl.groupStart()
        try:
            for root, c in enumerate(counts):
                if c:
                    call(root, c, offs[root])
        finally:
            self.nccl.groupEnd()

    def broadcast(self, buf, root: int) -> None:
        self._check(buf)
        with self.cp.cuda.Device(self.device):
            if buf.size:
                self.nccl_comm.broadcast(buf.data.ptr, buf.data.ptr, buf.size, self._dtype(buf), root,
                                         self._stream())

    def close(self) -> None:
        comm, self.nccl_comm = getattr(self, "nccl_comm", None), None
        if comm is not None:
            comm.destroy()
