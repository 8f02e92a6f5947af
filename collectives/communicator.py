"""The public object: ``Communicator`` and its collectives.

Every call adapts its arrays once (arrays.py: numpy, cupy or torch), checks
its arguments on the caller's thread before a byte moves, builds the header,
and hands over to dispatch.py, which runs it (now, or queued behind earlier
async calls): header agreement (agree.py), then the algorithm chosen at
construction. The checks and the header make a plan (plan.py), kept for a
call that passes the same objects again, which then only checks that they
are unchanged.
"""
from __future__ import annotations

import itertools
import os


import numpy as np

from . import plan, ring
from .agree import ALGORITHMS, MAX_SMALL_BYTES
from .arrays import tensor_in_heap
from .context import Context
from .dispatch import Dispatcher, make_baseline
from .dtypes import dtype_code
from .kernels import NUMPY_KERNELS
from .work import Engine

DEFAULT_CHUNK_BYTES = 1 << 20  # fewer, larger messages won here: each rendezvous costs ~10 us
DEFAULT_SMALL_BYTES = 128 * 1024  # recursive doubling beats the ring below this (bench: 2 and 4 ranks)
_ids = itertools.count()
_MISS = object()  # _replay: no cached plan ran


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
        self._plans: dict = {}  # (collective, id(x), id(out), op or root) -> Plan: see plan.py
        self._barrier_plan = None
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
        key = ("ar", id(x), id(out), op) if type(op) is str else None
        done = self._replay(key, x, out, async_op)
        if done is not _MISS:
            return done
        return self._dispatch(*plan.all_reduce(self, key, x, op, out), async_op)

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
        key = ("rs", id(x), id(out), op) if counts is None and type(op) is str else None
        done = self._replay(key, x, out, async_op)
        if done is not _MISS:
            return done
        return self._dispatch(*plan.reduce_scatter(self, key, x, op, out, counts), async_op)

    def all_gather(self, x, out=None, counts=None, async_op: bool = False):
        """Gather every rank's ``x`` into one flat array, in rank order.

        Args:
          x: this rank's piece (contiguous); may be exactly its own segment of
            ``out`` (in place), but may not otherwise overlap it.
          out: receives sum(counts) elements.
          counts: elements per rank; by default every piece has x.size.
          async_op: return a Work instead of the result.
        """
        key = ("ag", id(x), id(out)) if counts is None else None
        done = self._replay(key, x, out, async_op)
        if done is not _MISS:
            return done
        return self._dispatch(*plan.all_gather(self, key, x, out, counts), async_op)

    def broadcast(self, x, root: int = 0, out=None, async_op: bool = False):
        """Copy ``root``'s ``x`` to every rank.

        Args:
          x: contiguous array or tensor (its contents matter on ``root`` only).
          root: the rank whose ``x`` is sent.
          out: where to write (same size, dtype and kind); ``out=x`` is in place.
          async_op: return a Work instead of the result.
        """
        key = ("bc", id(x), id(out), root) if type(root) is int else None
        done = self._replay(key, x, out, async_op)
        if done is not _MISS:
            return done
        return self._dispatch(*plan.broadcast(self, key, x, root, out), async_op)

    def barrier(self, async_op: bool = False):
        """Return once every rank has entered the barrier."""
        p = self._barrier_plan
        if p is None:
            p = self._barrier_plan = plan.barrier(self)
        return self._dispatch(p, None, None, async_op)

    def _replay(self, key, x, out, async_op: bool):
        """A repeated call on the same objects runs its cached plan (plan.py), checked in a
        few compares; _MISS when there is none (key None: not cacheable) or it no longer fits."""
        p = self._plans.get(key) if key is not None else None
        if p is not None:
            got = p.take(x, out)
            if got is not None:
                return self._dispatch(p, got[0], got[1], async_op)
        return _MISS

    def alloc(self, shape, dtype=np.float32):
        """A numpy array in the node's symmetric heap: collectives on such arrays read
        peers' memory directly (collectives/symmetric). Every rank must call it, with
        the same shapes in the same order, and pass heap arrays on every rank.
        The arrays live until ``close()``, which unmaps them.

        Args:
          shape: the array's shape.
          dtype: a supported numpy dtype (see dtypes.py), or a torch dtype: then a CPU
            torch tensor over the same heap memory (the torch process group's
            collectives on it take the direct path too).
        """
        if type(dtype).__module__ == "torch":  # the caller has torch imported already
            return tensor_in_heap(self.alloc, shape, dtype)
        dtype_code(np.dtype(dtype))
        if self._symmetric is None:
            from .symmetric import Symmetric
            self._symmetric = Symmetric(self, direct=self.algorithm == "ring")
            self._plans.clear()  # plans made before chose their path without the heap
            self._barrier_plan = None
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
