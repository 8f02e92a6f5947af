"""The copies alone: the floor under any two-process collective on one node (``--algorithm copy``).

bench/collectives.py times this beside the others on the same buffers. Each
rank makes only the copies and reductions a collective of private arrays cannot
do without, in C, with no synchronisation at all (every rank reads its peers'
inputs as they were when the case began, which the timing does not change):

- all-gather: every peer's piece read once across processes (``process_vm_readv``,
  the single copy Open MPI's shared-memory transport makes for large messages,
  and the one our direct road makes), then the own piece copied into ``out`` (with streaming
  stores from the tuning's ``stream_min_bytes``, as our all-gather copies it);
- broadcast: the root copies its input into ``out``; every other rank reads it once;
- all-reduce, reduce-scatter: each peer's input (or segment) read once, then reduced
  with the own into ``out``.

So where ``ring`` and ``mpi`` both sit at ``copy``'s time, the case is bound by
the copies both must make, not by either's protocol. Its results are not a
collective's (nothing orders the reads after the peers' writes), so its rows
are not checked: their #wrong column says "-".
"""
from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from collectives.fast.codes import C, DTYPES, OPS, streams
from collectives.tuning import load
from collectives.symmetric.cma import address


class CopyFloor:
    """The copies of each collective alone, as a benchmark communicator.

    Args:
      world: MPI's world; every rank must be on one node and allowed to read its peers'
        memory (same user, no ptrace restriction), as our CMA reads need.
    """

    name = "copy"
    unchecked = True  # bench/collectives.py: no #wrong for these rows

    def __init__(self, world):
        if C is None:
            raise RuntimeError("--algorithm copy needs the C extension (collectives._fastpath)")
        self.world = world.Dup()
        self.rank, self.size = world.rank, world.size
        self.pids = self.world.allgather(os.getpid())
        self.stream_min = load().stream_min_bytes
        self._keep = []

    def caller(self, case, fresh: bool):
        """The copies of ``case`` as one C program (csrc/fastpath.c's COPY, CMAREAD, REDUCE)."""
        w, r, n = self.world, self.rank, self.size
        x, out, op = case.x, case.out, case.op
        peers = w.allgather(address(x))
        at = np.array(peers, dtype=np.int64)  # CMAREAD reads a peer's address from memory
        keep = [at]
        words = []

        def read(q, dst, offset, nbytes):
            words.extend([C.CMAREAD, self.pids[q], address(at) + 8 * q, offset, address(dst), nbytes])

        if op == "all_gather":
            piece = x.nbytes
            for q in range(n):
                if q != r:
                    read(q, out[q * x.size:(q + 1) * x.size], 0, piece)
            # the own piece as our all-gather copies it: streaming stores from stream_min_bytes
            words.extend([C.STREAM if streams(piece, self.stream_min) else C.COPY, address(out) + r * piece,
                          address(x), piece])
        elif op == "broadcast":
            if r == 0:
                words.extend([C.COPY, address(out), address(x), x.nbytes])
            else:
                read(0, out, 0, x.nbytes)
        else:  # all-reduce, reduce-scatter: peers' inputs (this rank's segment of them) in, reduced
            seg = out.size
            lo = 0 if op == "all_reduce" else r * seg
            tmp = [np.empty(seg, x.dtype) for _ in range(n)]
            keep += tmp
            srcs = []
            for q in range(n):
                if q == r:
                    srcs.append(address(x) + lo * x.itemsize)
                else:
                    read(q, tmp[q], lo * x.itemsize, seg * x.itemsize)
                    srcs.append(address(tmp[q]))
            if n > 1 and x.dtype in DTYPES and case.redop in OPS:
                words.extend([C.REDUCE, DTYPES[x.dtype], OPS[case.redop], address(out), seg, n, *srcs])
        prog = np.array(words + [C.END], dtype=np.int64)
        keep.append(prog)
        self._keep = keep  # the case's program and what it addresses live until the next case
        run, a = C.run, address(prog)
        w.Barrier()
        return lambda: run(a, 0, 1e18, 0.0, 0.0, 0.0)

    def barrier(self) -> None:
        self.world.Barrier()

    def close(self) -> None:
        self.world.Free()
