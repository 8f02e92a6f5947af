"""The mpi road: MPI's own collectives behind the Communicator's API.

The datatypes come from the dtype table (dtypes.py, its ``mpi`` column).
MPI has no bfloat16 or (in Open MPI) float16 reductions, so half types use a
2-byte datatype and a user-defined op that reduces in float32 in numpy, as
the ring's kernels do; types MPI has no datatype for (float8) move as bytes
of their size. Sums of 8- and 16-bit integers take a numpy op too: Open
MPI's vectorized op component saturates them (5.0.11: a uint8, int16 or
uint16 sum of 1000 elements on two ranks gave 255, 32767, 65535 where C
wraps, as Gloo, NCCL and the ring do). bool is MPI's C_BOOL, which reduces with the logical ops:
sum and max are or, prod and min are and, as the ring's kernels have them.
avg arrives here as sum: dispatch.py pre-scales floats and divides integers
afterwards, for every algorithm alike. (What MPI costs a user who calls
mpi4py directly is bench/collectives.py's to show.)

In place is the one aliasing rule's verdict (arrays.check_overlap, before
the call; any other overlap was refused there): dispatch passes an in-place
all-reduce's x as out itself, and an all-gather's ``in_place`` when x is its
own segment of out. Those send MPI.IN_PLACE (MPI forbids overlapping send
and receive buffers).

These are MPI's blocking collectives (the ones users benchmark against); a
blocking MPI call cannot be cancelled, so only the header agreement before
them has a deadline.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..dtypes import TABLE, info
from ..kernels.numpy_kernels import NUMPY_KERNELS
from ..host.schedule import offsets

_NATIVE_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN,
               "band": MPI.BAND, "bor": MPI.BOR, "bxor": MPI.BXOR}
_LOGICAL_OPS = {"sum": MPI.LOR, "prod": MPI.LAND, "max": MPI.LOR, "min": MPI.LAND,
                "band": MPI.LAND, "bor": MPI.LOR, "bxor": MPI.LXOR}  # C_BOOL's
_NATIVE_TYPES = {row.numpy: getattr(MPI, row.mpi) for row in TABLE if row.mpi is not None}


class MpiAlgorithm:
    """MPI's collectives on a duplicate of the bootstrap's MPI communicator.

    Args:
      bootstrap: the communicator's bootstrap; it must be MPI's (``mpi_comm``).
    """

    def __init__(self, bootstrap):
        if getattr(bootstrap, "mpi_comm", None) is None:
            raise ValueError("algorithm='mpi' needs ranks started by an MPI launcher (an MPI bootstrap)")
        self.comm = bootstrap.mpi_comm.Dup()
        self._byte_types: dict[int, MPI.Datatype] = {}  # item size -> contiguous bytes
        self._numpy_ops: dict[tuple[str, str], MPI.Op] = {}

    def _spec(self, arr: np.ndarray):
        t = _NATIVE_TYPES.get(arr.dtype)
        if t is not None:
            return [arr.reshape(-1), arr.size, t]
        size = arr.dtype.itemsize
        if size not in self._byte_types:
            self._byte_types[size] = MPI.BYTE.Create_contiguous(size).Commit()
        return [arr.reshape(-1).view(np.uint8), arr.size, self._byte_types[size]]

    def _op(self, op: str, dtype) -> MPI.Op:
        row = info(dtype)
        saturates = op == "sum" and row.kind in ("int", "uint") and row.numpy.itemsize <= 2
        if row.mpi is not None and not saturates:
            return (_LOGICAL_OPS if row.kind == "bool" else _NATIVE_OPS)[op]
        key = (op, row.name)  # half types (reduced in float32), short integer sums: numpy's
        if key not in self._numpy_ops:
            def reduce(inbuf, inoutbuf, datatype, dt=row.numpy, base=op):
                a = np.frombuffer(inbuf, dtype=dt)
                b = np.frombuffer(inoutbuf, dtype=dt)
                NUMPY_KERNELS.reduce(base, a, b, b)

            self._numpy_ops[key] = MPI.Op.Create(reduce, commute=True)
        return self._numpy_ops[key]

    def all_reduce(self, x, out, op):
        send = MPI.IN_PLACE if out is x else self._spec(x)
        self.comm.Allreduce(send, self._spec(out), op=self._op(op, x.dtype))

    def reduce_scatter(self, x, out, counts, op):
        self.comm.Reduce_scatter(self._spec(x), self._spec(out), recvcounts=counts,
                                 op=self._op(op, x.dtype))

    def all_gather(self, x, out, counts, in_place: bool = False):
        spec = self._spec(out)
        displs = offsets(counts)[:-1]
        send = MPI.IN_PLACE if in_place else self._spec(x)
        self.comm.Allgatherv(send, [spec[0], (list(counts), displs), spec[2]])

    def broadcast(self, buf, root):
        self.comm.Bcast(self._spec(buf), root=root)

    def close(self):
        for op in self._numpy_ops.values():
            op.Free()
        for t in self._byte_types.values():
            t.Free()
        self.comm.Free()
