"""The public object: ``Communicator``, its collectives and their argument checks.

Every call adapts its arrays once (arrays.py: numpy, cupy or torch), checks
its arguments on the caller's thread before a byte moves, builds the header,
and hands over to dispatch.py, which runs it (now, or queued behind earlier
async calls): header agreement (agree.py), then the algorithm chosen at
construction.
"""
from __future__ import annotations

import itertools
import numbers
import os


import numpy as np

from . import ring
from .agree import ALGORITHMS, COLLECTIVES, MAX_SMALL_BYTES, digest, make_header
from .arrays import NUMPY, Array, adapt, check_overlap
from .context import Context
from .dispatch import Dispatcher, make_baseline
from .dtypes import check_op, dtype_code
from .kernels import NUMPY_KERNELS
from .schedule import check_counts
from .work import Engine

DEFAULT_CHUNK_BYTES = 1 << 20  # fewer, larger messages won here: each rendezvous costs ~10 us
DEFAULT_SMALL_BYTES = 128 * 1024  # recursive doubling beats the ring below this (bench: 2 and 4 ranks)
_ids = itertools.count()


class Communicator(Dispatcher):
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
        self._baseline = make_baseline(algorithm, transport)
        self.transport = transport
        self.rank, self.size = transport.rank, transport.size
        self._seq = 0
        self._even_counts: dict = {}  # piece size -> (equal counts, digest): see _even
        self._scratch: dict = {}
        self._cache: dict = {}
        self._broken: BaseException | None = None
        self._device_transport = None
        self._engine = Engine(f"collectives-r{self.rank}-{next(_ids)}")
        self._host_scratch = self._scratch_for(NUMPY_KERNELS)
        # host collectives reuse one Context (dispatch.py renews it per call): one runs at a time
        self._host_ctx = Context(transport, NUMPY_KERNELS, "", self.timeout, self.chunk_bytes,
                                 self._host_scratch, tracer, self._cache, self.window)
        self._symmetric = None  # the node's symmetric heap (collectives/symmetric), made by the first alloc()
        if os.environ.get("COLLECTIVES_STAGE") != "0" and getattr(transport, "comm", None) is not None:
            from .symmetric import staged  # ordinary host arrays staged through it where that wins
            self._symmetric = staged(self)

    # ------------------------------------------------------------------ API
    def all_reduce(self, x, op: str = "sum", out=None, async_op: bool = False):
        """Reduce ``x`` over all ranks; every rank gets the result.

        Args:
          x: contiguous numpy or cupy array, or torch tensor (CPU or CUDA).
          op: "sum", "avg", "max", "min" or "prod". avg divides floating
            inputs by the world size before summing (as NCCL does); integers
            are summed, then divided, truncating toward zero.
          out: where to write (same size, dtype and kind); ``out=x`` is in place.
          async_op: return a Work instead of the result.

        Returns:
          ``out`` (a new array of x's kind and shape when None), or a Work.
        """
        code = check_op(op)
        xa = adapt(x, "x")
        oa, in_place = self._out(out, xa, None, "all_reduce")
        hdr = self._header("all_reduce", xa, op=code, count=xa.flat.size)
        return self._dispatch("all_reduce", hdr, xa, oa, in_place, async_op, op)

    def reduce_scatter(self, x, op: str = "sum", out=None, counts=None, async_op: bool = False):
        """Reduce ``x`` over all ranks; rank r gets the r-th segment.

        Args:
          x: contiguous array or tensor; its flat elements are split into segments.
          op: reduction op (see all_reduce).
          out: receives counts[rank] elements; must not overlap x.
          counts: elements per rank (uneven and zero allowed); by default an
            equal split, which needs x.size divisible by the world size.
          async_op: return a Work instead of the result.
        """
        code = check_op(op)
        xa = adapt(x, "x")
        if counts is None:
            if xa.size % self.size:
                raise ValueError(f"reduce_scatter: x has {xa.size} elements, not divisible by "
                                 f"world size {self.size}; pass counts= for an uneven split")
            counts, fingerprint = self._even(xa.size // self.size)
        else:
            counts = check_counts(counts, self.size, "reduce_scatter")
            if sum(counts) != xa.size:
                raise ValueError(f"reduce_scatter: counts add up to {sum(counts)}, x has {xa.size} elements")
            fingerprint = digest(counts)
        oa, _ = self._out(out, xa, counts[self.rank], "reduce_scatter")
        hdr = self._header("reduce_scatter", xa, op=code, count=xa.size, counts=fingerprint)
        return self._dispatch("reduce_scatter", hdr, xa, oa, False, async_op, op, counts)

    def all_gather(self, x, out=None, counts=None, async_op: bool = False):
        """Gather every rank's ``x`` into one flat array, in rank order.

        Args:
          x: this rank's piece (contiguous); may be exactly its own segment of
            ``out`` (in place), but may not otherwise overlap it.
          out: receives sum(counts) elements.
          counts: elements per rank; by default every piece has x.size.
          async_op: return a Work instead of the result.
        """
        xa = adapt(x, "x")
        if counts is None:
            counts, fingerprint = self._even(xa.size)
        else:
            counts = check_counts(counts, self.size, "all_gather")
            if counts[self.rank] != xa.size:
                raise ValueError(f"all_gather: counts[{self.rank}] = {counts[self.rank]} but x has "
                                 f"{xa.size} elements on rank {self.rank}")
            fingerprint = digest(counts)
        # the header counts the whole output, however the counts were given
        oa, in_place = self._out(out, xa, sum(counts), "all_gather", offset=sum(counts[:self.rank]))
        hdr = self._header("all_gather", xa, count=oa.size, counts=fingerprint)
        return self._dispatch("all_gather", hdr, xa, oa, in_place, async_op, counts)

    def broadcast(self, x, root: int = 0, out=None, async_op: bool = False):
        """Copy ``root``'s ``x`` to every rank.

        Args:
          x: contiguous array or tensor (its contents matter on ``root`` only).
          root: the rank whose ``x`` is sent.
          out: where to write (same size, dtype and kind); ``out=x`` is in place.
          async_op: return a Work instead of the result.
        """
        xa = adapt(x, "x")
        if not isinstance(root, numbers.Integral) or not 0 <= root < self.size:
            raise ValueError(f"broadcast: root {root!r} is not a rank of this group (size {self.size})")
        oa, in_place = self._out(out, xa, None, "broadcast")
        hdr = self._header("broadcast", xa, count=xa.size, root=int(root))
        return self._dispatch("broadcast", hdr, xa, oa, in_place, async_op, int(root))

    def barrier(self, async_op: bool = False):
        """Return once every rank has entered the barrier."""
        hdr = self._header("barrier", None)
        return self._dispatch("barrier", hdr, None, None, False, async_op)

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
        # a snapshot first: the progress thread may add a buffer meanwhile, and
        # iterating a dict that grows raises "dictionary changed size"
        return sum(b.nbytes for b in tuple(self._scratch.values()))

    def memory_bytes(self) -> dict[str, int]:
        """Bytes this communicator holds now for its own use, by part: ``scratch``
        (receive, partial-sum and agreement buffers) and ``symmetric`` (the heap's
        scratch, stage and control windows; not the arrays ``alloc`` returned)."""
        sym = self._symmetric
        return {"scratch": self.scratch_bytes(), "symmetric": sym.heap.overhead_bytes() if sym is not None else 0}

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

    # ------------------------------------------------------------- helpers
    def _header(self, name, xa: Array | None, op=0, count=0, counts=0, root=0):
        seq = self._seq
        self._seq += 1
        if xa is None:
            dtype, device = 0, 0
        else:
            dtype, device = dtype_code(xa.flat.dtype), int(xa.device)
        return make_header(seq, COLLECTIVES[name], op, dtype, count, counts, root,
                           ALGORITHMS[self.algorithm], self.chunk_bytes, self.small_bytes, device)

    def _out(self, out, xa: Array, n: int | None, what: str, offset: int = 0) -> tuple[Array, bool]:
        """(``out`` adapted and checked against ``x`` (n elements; None: x's size), or a new
        array of x's kind; whether the call is in place). The aliasing rule
        (arrays.check_overlap) is checked here."""
        if out is None:
            return xa.kind.empty(xa, n), False
        if out is xa.obj and n is None and (xa.kind is not NUMPY or out.flags.writeable):
            return xa, True  # in place (all_reduce, broadcast): x adapted once serves as out
        if type(out) is np.ndarray and xa.kind is NUMPY and out.dtype is xa.flat.dtype \
                and out.size == (xa.flat.size if n is None else n) and out.flags.c_contiguous and out.flags.writeable:
            # the common case, a host array of the right size and type, in a few checks
            oa = Array(out, out if out.ndim == 1 else out.reshape(-1), NUMPY_KERNELS, False, NUMPY)
            if out.base is None and xa.obj.base is None and out is not xa.obj:
                return oa, False  # two arrays that own their memory share none of it
            return oa, check_overlap(what, xa, oa, self.rank, offset)
        oa = adapt(out, "out", writable=True)
        want = xa.size if n is None else n
        if oa.flat.dtype != xa.flat.dtype:
            raise TypeError(f"{what}: out has dtype {oa.flat.dtype}, x has {xa.flat.dtype}")
        if oa.size != want:
            raise ValueError(f"{what}: out has {oa.size} elements, expected {want}")
        if oa.device != xa.device:
            raise TypeError(f"{what}: out and x must both be host (numpy, CPU torch) or both device "
                            f"(cupy, CUDA torch) arrays; x is a {xa.kind.name}, out a {oa.kind.name}")
        return oa, check_overlap(what, xa, oa, self.rank, offset)

    def _even(self, piece: int) -> tuple[tuple[int, ...], int]:
        """(counts of an equal split, their digest), remembered per piece size: the
        digest is a Python loop over the ranks, on every small call otherwise."""
        got = self._even_counts.get(piece)
        if got is None:
            if len(self._even_counts) >= 64:  # a caller cycling through sizes
                self._even_counts.clear()
            counts = (piece,) * self.size  # a tuple: shared by calls, so never modified
            got = self._even_counts[piece] = (counts, digest(counts))
        return got
