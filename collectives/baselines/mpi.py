"""The mpi road: MPI's own collectives behind the Communicator's API.

MPI has no bfloat16 or (in Open MPI) float16 reductions, so half types use a
2-byte datatype and a user-defined op that reduces in float32 in numpy, as
the ring's kernels do. avg arrives here as sum: dispatch.py pre-scales
floats and divides integers afterwards, for every algorithm alike. (What MPI
costs a user who calls mpi4py directly is bench/collectives.py's to show.)

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

from ..dtypes import HALF, dtype_name
from ..kernels.numpy_kernels import NUMPY_KERNELS
from ..host.schedule import offsets

_NATIVE_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
_NATIVE_TYPES = {"float32": MPI.FLOAT, "float64": MPI.DOUBLE, "int32": MPI.INT32_T, "int64": MPI.INT64_T}


class MpiAlgorithm:
    """MPI's collectives on a duplicate of the bootstrap's MPI communicator.

    Args:
      bootstrap: the communicator's bootstrap; it must be MPI's (``mpi_comm``).
    """

    def __init__(self, bootstrap):
        if getattr(bootstrap, "mpi_comm", None) is None:
            raise ValueError("algorithm='mpi' needs ranks started by an MPI launcher (an MPI bootstrap)")
        self.comm = bootstrap.mpi_comm.Dup()
        self._half_type = MPI.BYTE.Create_contiguous(2).Commit()
        self._half_ops: dict[tuple[str, str], MPI.Op] = {}

    def _spec(self, arr: np.ndarray):
        name = dtype_name(arr.dtype)
        if name in HALF:
            return [arr.reshape(-1).view(np.uint16), arr.size, self._half_type]
        return [arr.reshape(-1), arr.size, _NATIVE_TYPES[name]]

    def _op(self, op: str, dtype) -> MPI.Op:
        name = dtype_name(dtype)
        if name not in HALF:
            return _NATIVE_OPS[op]
        key = (op, name)
        if key not in self._half_ops:
            def reduce(inbuf, inoutbuf, datatype, dt=np.dtype(dtype), base=op):
                a = np.frombuffer(inbuf, dtype=dt)
                b = np.frombuffer(inoutbuf, dtype=dt)
                NUMPY_KERNELS.reduce(base, a, b, b)

            self._half_ops[key] = MPI.Op.Create(reduce, commute=True)
        return self._half_ops[key]

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
        for op in self._half_ops.values():
            op.Free()
        self._half_type.Free()
        self.comm.Free()
