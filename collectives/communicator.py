"""The public object: ``Communicator`` and its collectives.

Every call checks its arguments on the caller's thread before a byte moves,
then runs (now, or queued behind earlier async calls) as: header agreement
(see agree.py), then the algorithm chosen at construction.
"""
from __future__ import annotations

import itertools
import numbers
import os

import numpy as np

from . import ring, small
from .agree import ALGORITHMS, COLLECTIVES, MAX_SMALL_BYTES, agree, digest, make_header, start_agreement
from .context import Context
from .dtypes import DTYPES, check_op, dtype_code
from .errors import CollectiveError
from .kernels import NUMPY_KERNELS, is_device_array, kernels_for
from .schedule import split_counts
from .work import Engine

DEFAULT_CHUNK_BYTES = 1 << 20  # fewer, larger messages won here: each rendezvous costs ~10 us
DEFAULT_SMALL_BYTES = 128 * 1024  # recursive doubling beats the ring below this (bench: 2 and 4 ranks)
_ids = itertools.count()


class Communicator:
    """Ring collectives over a group of ranks.

    Args:
      mpi_comm: an mpi4py communicator; COMM_WORLD when None.
      algorithm: "ring" (ours), "mpi" (MPI's own collectives, the baseline)
        or "nccl" (GPU baseline).
      timeout: seconds every collective may take before it raises
        CollectiveTimeout naming the rank, peer, step and chunk.
      chunk_bytes: the ring's chunk size; small values exercise the
        multi-chunk paths in tests. At most 1 GiB (ring.MAX_MESSAGE_BYTES):
        one MPI message must stay under 2 GiB.
      small_bytes: all-reduces of up to this many bytes ride in the header
        exchange (recursive doubling); reduce-scatters and all-gathers, which
        move the whole buffer on that road, up to a quarter of it (the
        crossovers measured on 2 ranks here: 128 KiB and 32-64 KiB). At most
        MAX_SMALL_BYTES (256 KiB): every header receive has room for that much.
      verify: run the header agreement before every collective (on by
        default; benchmarks of MPI's own collectives turn it off). Off, a
        mismatched call is undefined behaviour, as it is in MPI.
      transport: a ready transport (e.g. ``Fabric(n).transport(r)`` for
        simulated ranks) instead of MPI.
      tracer: optional recorder of every send, receive, wait and reduce.
      window: reduce-scatter chunks with a receive posted at once (their
        receive slots stay in cache).
    """

    def __init__(self, mpi_comm=None, algorithm: str = "ring", timeout: float = 300.0, *,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, small_bytes: int = DEFAULT_SMALL_BYTES,
                 verify: bool = True, transport=None, tracer=None, window: int = 2):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if not 1 <= chunk_bytes <= ring.MAX_MESSAGE_BYTES or not 0 <= small_bytes <= MAX_SMALL_BYTES:
            raise ValueError(f"bad chunk_bytes={chunk_bytes} or small_bytes={small_bytes} (1 <= chunk_bytes "
                             f"<= {ring.MAX_MESSAGE_BYTES}, 0 <= small_bytes <= {MAX_SMALL_BYTES})")
        if window < 1:
            raise ValueError(f"window must be >= 1 chunk, got {window}")
        self.algorithm, self.timeout = algorithm, float(timeout)
        self.chunk_bytes, self.small_bytes, self.verify = int(chunk_bytes), int(small_bytes), verify
        if tracer is None:
            from .trace import tracer_from_env
            tracer = tracer_from_env()  # COLLECTIVES_TRACE=path: one Chrome trace per rank at exit
        self.tracer = tracer
        self.window = int(window)
        if transport is None:
            from mpi4py import MPI

            from .transport.mpi import MpiTransport
            transport = MpiTransport(mpi_comm if mpi_comm is not None else MPI.COMM_WORLD)
        elif algorithm != "ring":
            raise ValueError(f"algorithm {algorithm!r} needs an MPI communicator, not a custom transport")
        # The baselines: someone else's collectives behind our API (None for our ring).
        self._baseline = _make_baseline(algorithm, transport)
        self.transport = transport
        self.rank, self.size = transport.rank, transport.size
        self._seq = 0
        self._scratch: dict = {}
        self._cache: dict = {}
        self._broken: BaseException | None = None
        self._device_transport = None
        self._engine = Engine(f"collectives-r{self.rank}-{next(_ids)}")
        self._host_scratch = self._scratch_for(NUMPY_KERNELS)
        self._symmetric = None  # the symmetric heap (collectives/symmetric), made by the first alloc()
        if os.environ.get("COLLECTIVES_STAGE") == "1":  # ordinary host arrays staged through it too
            from .symmetric import staged
            self._symmetric = staged(self)

    # ------------------------------------------------------------------ API
    def all_reduce(self, x, op: str = "sum", out=None, async_op: bool = False):
        """Reduce ``x`` over all ranks; every rank gets the result.

        Args:
          x: contiguous numpy or cupy array.
          op: "sum", "avg", "max", "min" or "prod".
          out: where to write (same shape size and dtype); ``out=x`` is in place.
          async_op: return a Work instead of the result.
        """
        code = check_op(op)
        self._check_array(x, "x")
        out = self._out(out, x, x.size, "out", like=x)
        hdr = self._header("all_reduce", x, op=code, count=x.size)
        if self._symmetric is not None and self._symmetric.takes(x):  # x in the heap: read peers directly
            return self._launch("all_reduce", hdr, lambda c: self._symmetric.all_reduce(c, hdr, x, out, op), out,
                                async_op)
        xf, of = x.reshape(-1), out.reshape(-1)
        return self._launch("all_reduce", hdr, lambda ctx: self._all_reduce(ctx, hdr, xf, of, op), out, async_op)

    def reduce_scatter(self, x, op: str = "sum", out=None, counts=None, async_op: bool = False):
        """Reduce ``x`` over all ranks; rank r gets the r-th segment.

        Args:
          x: contiguous array; its flat elements are split into segments.
          op: reduction op.
          out: receives counts[rank] elements.
          counts: elements per rank (uneven and zero allowed); by default an
            equal split, which needs x.size divisible by the world size.
          async_op: return a Work instead of the result.
        """
        code = check_op(op)
        self._check_array(x, "x")
        if counts is None:
            if x.size % self.size:
                raise ValueError(f"reduce_scatter: x has {x.size} elements, not divisible by "
                                 f"world size {self.size}; pass counts= for an uneven split")
            counts = [x.size // self.size] * self.size
        else:
            counts = self._check_counts(counts, "reduce_scatter")
            if sum(counts) != x.size:
                raise ValueError(f"reduce_scatter: counts add up to {sum(counts)}, x has {x.size} elements")
        out = self._out(out, x, counts[self.rank], "out")
        if not is_device_array(x) and np.shares_memory(out, x):
            raise ValueError("reduce_scatter: out must not overlap x")
        hdr = self._header("reduce_scatter", x, op=code, count=x.size, counts=digest(counts))
        if self._symmetric is not None and self._symmetric.takes(x):
            return self._launch("reduce_scatter", hdr,
                                lambda c: self._symmetric.reduce_scatter(c, hdr, x, out, counts, op), out, async_op)
        xf, of = x.reshape(-1), out.reshape(-1)
        return self._launch("reduce_scatter", hdr,
                            lambda ctx: self._reduce_scatter(ctx, hdr, xf, of, counts, op), out, async_op)

    def all_gather(self, x, out=None, counts=None, async_op: bool = False):
        """Gather every rank's ``x`` into one flat array, in rank order.

        Args:
          x: this rank's piece (contiguous).
          out: receives sum(counts) elements.
          counts: elements per rank; by default every piece has x.size.
          async_op: return a Work instead of the result.
        """
        self._check_array(x, "x")
        if counts is None:
            counts, cnt = [x.size] * self.size, x.size
        else:
            counts = self._check_counts(counts, "all_gather")
            if counts[self.rank] != x.size:
                raise ValueError(f"all_gather: counts[{self.rank}] = {counts[self.rank]} but x has "
                                 f"{x.size} elements on rank {self.rank}")
            cnt = sum(counts)
        out = self._out(out, x, sum(counts), "out")
        hdr = self._header("all_gather", x, count=cnt, counts=digest(counts))
        if self._symmetric is not None and self._symmetric.takes(x):
            return self._launch("all_gather", hdr, lambda c: self._symmetric.all_gather(c, hdr, x, out, counts), out,
                                async_op)
        xf, of = x.reshape(-1), out.reshape(-1)
        return self._launch("all_gather", hdr, lambda ctx: self._all_gather(ctx, hdr, xf, of, counts), out, async_op)

    def broadcast(self, x, root: int = 0, out=None, async_op: bool = False):
        """Copy ``root``'s ``x`` to every rank. ``out=x`` works in place."""
        self._check_array(x, "x")
        if not isinstance(root, numbers.Integral) or not 0 <= root < self.size:
            raise ValueError(f"broadcast: root {root!r} is not a rank of this group (size {self.size})")
        out = self._out(out, x, x.size, "out", like=x)
        hdr = self._header("broadcast", x, count=x.size, root=int(root))
        if self._symmetric is not None and self._symmetric.takes(x):
            return self._launch("broadcast", hdr, lambda c: self._symmetric.broadcast(c, hdr, x, out, int(root)), out,
                                async_op)
        xf, of = x.reshape(-1), out.reshape(-1)
        return self._launch("broadcast", hdr, lambda ctx: self._broadcast(ctx, hdr, xf, of, int(root)), out, async_op)

    def barrier(self, async_op: bool = False):
        """Return once every rank has entered the barrier."""
        hdr = self._header("barrier", None)
        if self._symmetric is not None and self._symmetric.enabled:
            return self._launch("barrier", hdr, lambda c: self._symmetric.barrier(c, hdr), None, async_op)
        return self._launch("barrier", hdr, lambda ctx: agree(ctx, hdr), None, async_op)

    def alloc(self, shape, dtype=np.float32) -> np.ndarray:
        """A numpy array in the node's symmetric heap: collectives on such arrays read
        peers' memory directly (collectives/symmetric). Every rank must call it, with
        the same shapes in the same order, and pass heap arrays on every rank.
        The arrays live until ``close()``, which unmaps them.

        Args:
          shape: the array's shape.
          dtype: a supported dtype (see dtypes.py).
        """
        dtype_code(np.dtype(dtype))
        if self._symmetric is None:
            from .symmetric import Symmetric
            self._symmetric = Symmetric(self, direct=self.algorithm == "ring")
        return self._symmetric.alloc(shape, dtype)

    def scratch_bytes(self) -> int:
        """Bytes of the reusable communication buffers this communicator holds now."""
        return sum(b.nbytes for b in self._scratch.values())

    def close(self) -> None:
        """Finish queued work and release the progress thread and MPI resources."""
        self._engine.close()
        if self._symmetric is not None:
            self._symmetric.close()
        if self._baseline is not None:
            self._baseline.close()
        if self._device_transport is not None:
            self._device_transport.close()
        self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<Communicator rank {self.rank}/{self.size} algorithm={self.algorithm}>"

    # ------------------------------------------------------------ execution
    def _launch(self, name, hdr, body, result, async_op):
        label = f"{name} #{self._seq - 1}"

        def task():
            if self._broken is not None:
                raise CollectiveError(f"rank {self.rank}: {label}: communicator is unusable after an "
                                      f"earlier error: {self._broken}") from self._broken
            if result is None or type(result) is np.ndarray:  # host arrays: everything prepared once
                kernels, transport, scratch = NUMPY_KERNELS, self.transport, self._host_scratch
            else:
                kernels = self._kernels(result)
                transport, scratch = self._transport_for(result), self._scratch_for(kernels)
            ctx = Context(transport, kernels, label, self.timeout, self._chunk_elems(result), scratch,
                          self.tracer, self._cache, self.window)
            try:
                if ctx.tracer is not None:
                    ctx.tracer.begin(label, rank=self.rank)
                body(ctx)
                if ctx.tracer is not None:
                    ctx.tracer.end(label, rank=self.rank)
            except BaseException as e:
                self._broken = e
                ctx.abandon()
                raise
            return result

        if async_op:
            return self._engine.submit(task, label)
        return self._engine.run(task, label)

    def _all_reduce(self, ctx, hdr, x, out, op):
        base = "sum" if op == "avg" else op
        if self._baseline is None and out.nbytes <= self.small_bytes:
            small.all_reduce(ctx, hdr, x, out, base)  # header rides along
        elif self._baseline is not None:
            self._agree(ctx, hdr)
            return self._baseline.all_reduce(x, out, op)
        else:
            self._ring(ctx, hdr, ring.all_reduce, x, out, split_counts(x.size, self.size, _granule(x)), base)
        if op == "avg":
            ctx.kernels.scale(out, self.size)

    def _reduce_scatter(self, ctx, hdr, x, out, counts, op):
        base = "sum" if op == "avg" else op
        if self._baseline is None and x.nbytes <= self.small_bytes // 4:
            small.reduce_scatter(ctx, hdr, x, out, counts, base)
        elif self._baseline is not None:
            self._agree(ctx, hdr)
            return self._baseline.reduce_scatter(x, out, counts, op)
        else:
            self._ring(ctx, hdr, ring.reduce_scatter, x, out, counts, base)
        if op == "avg":
            ctx.kernels.scale(out, self.size)

    def _all_gather(self, ctx, hdr, x, out, counts):
        if self._baseline is None and out.nbytes <= self.small_bytes // 4:
            return small.all_gather(ctx, hdr, x, out, counts)
        if self._baseline is not None:
            self._agree(ctx, hdr)
            return self._baseline.all_gather(x, out, counts)
        self._ring(ctx, hdr, ring.all_gather, x, out, counts)

    def _broadcast(self, ctx, hdr, x, out, root):
        self._agree(ctx, hdr)
        if out is not x and self.rank == root:
            ctx.kernels.copy(out, x)
        if self._baseline is not None:
            return self._baseline.broadcast(out, root)
        ring.broadcast(ctx, out, root)

    def _agree(self, ctx, hdr):
        if self.verify:
            agree(ctx, hdr)

    def _ring(self, ctx, hdr, algo, *args):
        """Run a ring collective with its header check inside: the ring posts its
        first sends, then starts and finishes the agreement (Context.checked)
        before it posts a receive, so the header round trip overlaps the sends
        and the local work, and no receive exists before the verdict."""
        if self.verify:
            ctx.check = lambda: start_agreement(ctx, hdr)
        algo(ctx, *args)
        ctx.checked()  # a path that posted nothing (one rank, zero counts) checks here

    # ------------------------------------------------------------- helpers
    def _header(self, name, x, op=0, count=0, counts=0, root=0):
        seq = self._seq
        self._seq += 1
        if x is None:
            dtype, device = 0, 0
        else:
            dtype, device = dtype_code(x.dtype), int(type(x) is not np.ndarray and is_device_array(x))
        return make_header(seq, COLLECTIVES[name], op, dtype, count, counts, root,
                           ALGORITHMS[self.algorithm], self.chunk_bytes, self.small_bytes, device)

    def _transport_for(self, x):
        """The transport that moves ``x``: host arrays go straight over MPI;
        device (cupy) arrays go through the device transport (CUDA-aware MPI,
        CUDA IPC or pinned-host staging; see transport/device.py)."""
        if x is None or not is_device_array(x):
            return self.transport
        if self._device_transport is None:
            from .transport.device import make_device_transport
            self._device_transport = make_device_transport(self.transport)
        return self._device_transport

    def _kernels(self, x):
        return kernels_for(x) if x is not None else kernels_for(np.empty(0))

    def _chunk_elems(self, x):
        return max(1, self.chunk_bytes // (x.dtype.itemsize if x is not None else 1))

    def _scratch_for(self, kernels):
        """scratch(name, n, dtype, host=False): reusable buffers where ``kernels`` computes
        (host=True: always host memory, for headers). Fresh allocations would
        page-fault on every call."""
        def scratch(name, n, dtype, host=False):
            k = NUMPY_KERNELS if host else kernels
            key = (name, np.dtype(dtype).str, k.name, getattr(k, "_device", None))
            buf = self._scratch.get(key)
            if buf is None or buf.size < n:
                buf = k.empty(max(n, 1), dtype)
                self._scratch[key] = buf
            return buf[:n]
        return scratch

    @staticmethod
    def _check_array(x, name):
        if type(x) is np.ndarray and x.dtype in _HOST_CODES and x.flags.c_contiguous:
            return  # the common case, in three checks
        if not isinstance(x, np.ndarray) and not is_device_array(x):
            raise TypeError(f"{name} must be a numpy or cupy array, got {type(x).__name__}")
        dtype_code(x.dtype)  # TypeError for unsupported dtypes
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (got strides {x.strides}); pass x.copy()")

    def _out(self, out, x, n, name, like=None):
        if (type(out) is np.ndarray and type(x) is np.ndarray and out.dtype is x.dtype and out.size == n
                and out.dtype in _HOST_CODES and out.flags.c_contiguous and out.flags.writeable):
            return out  # the common case: a host array of the right size and type
        if out is None:
            if like is not None:
                return kernels_for(x).xp.empty_like(like)
            return kernels_for(x).xp.empty(n, dtype=x.dtype)
        self._check_array(out, name)
        if out.dtype != x.dtype:
            raise TypeError(f"{name} has dtype {out.dtype}, x has {x.dtype}")
        if out.size != n:
            raise ValueError(f"{name} has {out.size} elements, expected {n}")
        if is_device_array(out) != is_device_array(x):
            raise TypeError(f"{name} and x must both be host (numpy) or both device (cupy) arrays")
        if not is_device_array(out) and not out.flags.writeable:
            raise ValueError(f"{name} is read-only")
        return out

    def _check_counts(self, counts, what):
        try:
            given = list(counts)
        except TypeError:
            raise TypeError(f"{what}: counts must be a sequence of integers, got {counts!r}") from None
        bad = [c for c in given if not isinstance(c, numbers.Integral)]
        if bad:  # int(2.5) would quietly make it 2
            raise TypeError(f"{what}: counts must be integers, got {bad[0]!r} in {given!r}")
        counts = [int(c) for c in given]
        if len(counts) != self.size:
            raise ValueError(f"{what}: counts has {len(counts)} entries, world size is {self.size}")
        if any(c < 0 for c in counts):
            raise ValueError(f"{what}: counts must be >= 0, got {counts}")
        return counts


_HOST_CODES = frozenset(dt for dt, _ in DTYPES.values())


def _make_baseline(algorithm: str, transport):
    """The registry of other libraries' collectives, imported only when asked for."""
    if algorithm == "mpi":
        from .mpi_algo import MpiAlgorithm
        return MpiAlgorithm(transport.comm)
    if algorithm == "nccl":
        from .nccl_algo import NcclAlgorithm  # a clear error without cupy or NCCL
        return NcclAlgorithm(transport)
    return None


def _granule(x) -> int:
    """Segments start on 64-byte boundaries so vector loads stay aligned."""
    return max(1, 64 // x.dtype.itemsize)
