"""The public object: ``Communicator`` and its collectives.

Every call adapts its arrays once (arrays.py: numpy, cupy or torch), checks
its arguments on the caller's thread before a byte moves, builds the header,
asks roads.py for its road, and hands over to dispatch.py, which runs it (now,
or queued behind earlier async calls). The checks, the header and the road
make a plan (plan.py), kept for a call that passes the same objects again,
which then only checks that they are unchanged. Before all that, a blocking
call with an ``out`` on the direct roads goes to the lane (fast/lane.py), which
runs the call's C program when its arrays are ones (or shaped like ones) a
C program was written for, whatever objects they are.
"""
from __future__ import annotations

import itertools

import numpy as np

from . import dispatch, plan, plan_cache, roads, tuning
from .arrays import tensor_in_heap
from .context import Context
from .dtypes import dtype_code
from .fast import lane as fast_lane
from .kernels import NUMPY_KERNELS
from .resources import Resources
from .roads import MAX_MESSAGE_BYTES, MAX_SMALL_BYTES, Road
from .roads_query import query
from .safety.header import ALGORITHMS
from .engine import Engine

_ids = itertools.count()


class Communicator(Resources):
    """Collectives over a group of ranks.

    Args:
      mpi_comm: an mpi4py communicator; COMM_WORLD when None (and no bootstrap or transport is given).
      algorithm: "ring" (ours), "mpi" (MPI's own collectives, a baseline) or "nccl" (GPU baseline).
      timeout: seconds every collective may take before it raises CollectiveTimeout
        naming the rank, peer, step and chunk.
      chunk_bytes: the ring's chunk size (default: the tuning table's); small values
        exercise the multi-chunk paths in tests. At most 1 GiB: one message must stay under 2 GiB.
      small_bytes: all-reduces of up to this many bytes ride in the header exchange;
        reduce-scatters and all-gathers up to a quarter of it (default: the tuning table's).
        At most 256 KiB: every header receive has room for that much.
      verify: run the header agreement before every collective (on by default;
        benchmarks of MPI's own collectives turn it off). Off, a mismatched call is
        undefined behaviour, as it is in MPI.
      bootstrap: how the ranks met (collectives/bootstrap); MPI's when None.
      transport: a ready transport (``Fabric(n).transport(r)`` for simulated ranks) instead
        of the bootstrap's; such a communicator has no heap.
      tracer: optional recorder of every send, receive, wait and reduce (teach/trace.py).
      window: reduce-scatter chunks with a receive posted at once.
      road: force a road (roads.py): a name for every collective it serves, or
        {collective: name}; also ``COLLECTIVES_ROAD``. Set it alike on every rank.
      stage: "0", "1" or "auto": whether ordinary host arrays are staged into the heap
        (default: the tuning table's ``stage``).
    """

    def __init__(self, mpi_comm=None, algorithm: str = "ring", timeout: float = 300.0, *,
                 chunk_bytes: int | None = None, small_bytes: int | None = None, verify: bool = True,
                 bootstrap=None, transport=None, tracer=None, window: int = 2, road=None, stage: str | None = None):
        given = {k: v for k, v in (("chunk_bytes", chunk_bytes), ("small_bytes", small_bytes)) if v is not None}
        t = self.tuning = tuning.load(**given)  # the arguments override the table (roads.choose reads it)
        chunk_bytes, small_bytes = t.chunk_bytes, t.small_bytes
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if not 1 <= chunk_bytes <= MAX_MESSAGE_BYTES or not 0 <= small_bytes <= MAX_SMALL_BYTES:
            raise ValueError(f"bad chunk_bytes={chunk_bytes} or small_bytes={small_bytes} (1 <= chunk_bytes "
                             f"<= {MAX_MESSAGE_BYTES}, 0 <= small_bytes <= {MAX_SMALL_BYTES})")
        if window < 1:
            raise ValueError(f"window must be >= 1 chunk, got {window}")
        self.algorithm, self.timeout, self.verify, self.window = algorithm, float(timeout), verify, int(window)
        self.chunk_bytes, self.small_bytes = int(chunk_bytes), int(small_bytes)
        # device buffers: the table's device chunk unless the caller set another host chunk than the default
        default = tuning.BY_NAME["chunk_bytes"].default
        self.device_chunk_bytes = t.device_chunk_bytes if self.chunk_bytes == default else self.chunk_bytes
        self.forced = roads.parse(road if road is not None else t.road)
        if tracer is None:
            from .teach.trace import tracer_from_env
            tracer = tracer_from_env(t.trace)  # one Chrome trace per rank at exit
        self.tracer = tracer
        if transport is None:
            if bootstrap is None:
                from .bootstrap.mpi import MpiBootstrap
                bootstrap = MpiBootstrap(mpi_comm)
            transport = bootstrap.transport(t)
        elif algorithm != "ring":
            raise ValueError(f"algorithm {algorithm!r} needs a bootstrap with MPI, not a custom transport")
        self.bootstrap, self.transport = bootstrap, transport
        self.rank, self.size = transport.rank, transport.size
        self.baseline = self._baseline(algorithm)
        self.seq = 0
        self.evens: dict = {}  # piece size -> (equal counts, digest): plan.even
        self.plans: dict = {}  # (collective, id(x), id(out), op or root) -> Plan: see plan_cache.py
        self.shapes: dict = {}  # plan_cache.shape_key -> the same Plans, for arrays just like their own
        self.last = None  # the plan of the latest call (road_taken)
        self.broken: BaseException | None = None
        self.cache: dict = {}
        self.engine = Engine(f"collectives-r{self.rank}-{next(_ids)}", grace=t.async_grace_us * 1e-6,
                             patience=t.async_patience_us * 1e-6)
        self.setup_resources()
        # host collectives reuse one Context (dispatch.execute renews it per call): one runs at a time
        self.host_ctx = Context(transport, NUMPY_KERNELS, "", self.timeout, self.chunk_bytes,
                                self.host_scratch, tracer, self.cache, self.window)
        self.symmetric = None  # the node's heap and direct roads (collectives/symmetric)
        self.lane = self._lane = None  # fast/lane.py: the Lane, and its run
        self.setup_staging(stage if stage is not None else t.stage)
        self._barrier_plan = None
        self._make_lane()

    def _make_lane(self) -> None:
        self.lane = fast_lane.make(self, self._replan) if self.symmetric is not None else None
        self._lane = self.lane.run if self.lane is not None else None

    def _replan(self, kind, x, out, arg):
        """A call the lane began, as the Python path plans it (no cache key)."""
        if kind == "all_reduce":
            return plan.all_reduce(self, None, x, arg, out)
        if kind == "reduce_scatter":
            return plan.reduce_scatter(self, None, x, arg, out, None)
        if kind == "all_gather":
            return plan.all_gather(self, None, x, out, None)
        return plan.broadcast(self, None, x, arg, out)

    # ------------------------------------------------------------------ API
    def all_reduce(self, x, op: str = "sum", out=None, async_op: bool = False):
        """Reduce ``x`` over all ranks; every rank gets the result.

        Args:
          x: contiguous numpy or cupy array, or torch tensor (CPU or CUDA).
          op: "sum", "avg", "max", "min", "prod", "band", "bor" or "bxor", as x's dtype
            takes them (dtypes.py). avg divides floating inputs by the world size
            before summing (as NCCL does); integers are summed, then divided,
            truncating toward zero.
          out: where to write (same size, dtype and kind); ``out=x`` is in place.
          async_op: return a Work instead of the result.

        Returns:
          ``out`` (a new array of x's kind and shape when None), or a Work.
        """
        if out is not None and not async_op:
            lane = self._lane
            if lane is not None:
                r = lane(0, x, out, op)
                if r is not None:
                    return r
        key = ("ar", id(x), id(out), op) if type(op) is str else None
        got = plan_cache.lookup(self, key, x, out, op) if key is not None else None
        if got is not None:
            return dispatch.dispatch(self, *got, async_op)
        return dispatch.dispatch(self, *plan.all_reduce(self, key, x, op, out), async_op)

    def reduce_scatter(self, x, op: str = "sum", out=None, counts=None, async_op: bool = False):
        """Reduce ``x`` over all ranks; rank r gets the r-th segment.

        Args:
          x: contiguous array or tensor; its flat elements are split into segments.
          op: reduction op (see all_reduce).
          out: receives counts[rank] elements; must not overlap x.
          counts: elements per rank (uneven and zero allowed); by default an equal
            split, which needs x.size divisible by the world size.
          async_op: return a Work instead of the result.
        """
        if out is not None and counts is None and not async_op:
            lane = self._lane
            if lane is not None:
                r = lane(1, x, out, op)
                if r is not None:
                    return r
        key = ("rs", id(x), id(out), op) if counts is None and type(op) is str else None
        got = plan_cache.lookup(self, key, x, out, op) if key is not None else None
        if got is not None:
            return dispatch.dispatch(self, *got, async_op)
        return dispatch.dispatch(self, *plan.reduce_scatter(self, key, x, op, out, counts), async_op)

    def all_gather(self, x, out=None, counts=None, async_op: bool = False):
        """Gather every rank's ``x`` into one flat array, in rank order.

        Args:
          x: this rank's piece (contiguous); may be exactly its own segment of ``out``
            (in place), but may not otherwise overlap it.
          out: receives sum(counts) elements.
          counts: elements per rank; by default every piece has x.size.
          async_op: return a Work instead of the result.
        """
        if out is not None and counts is None and not async_op:
            lane = self._lane
            if lane is not None:
                r = lane(2, x, out, None)
                if r is not None:
                    return r
        key = ("ag", id(x), id(out)) if counts is None else None
        got = plan_cache.lookup(self, key, x, out, None) if key is not None else None
        if got is not None:
            return dispatch.dispatch(self, *got, async_op)
        return dispatch.dispatch(self, *plan.all_gather(self, key, x, out, counts), async_op)

    def broadcast(self, x, root: int = 0, out=None, async_op: bool = False):
        """Copy ``root``'s ``x`` to every rank.

        Args:
          x: contiguous array or tensor (its contents matter on ``root`` only).
          root: the rank whose ``x`` is sent.
          out: where to write (same size, dtype and kind); ``out=x`` is in place.
          async_op: return a Work instead of the result.
        """
        if out is not None and not async_op:
            lane = self._lane
            if lane is not None:
                r = lane(3, x, out, root)
                if r is not None:
                    return r
        key = ("bc", id(x), id(out), root) if type(root) is int else None
        got = plan_cache.lookup(self, key, x, out, root) if key is not None else None
        if got is not None:
            return dispatch.dispatch(self, *got, async_op)
        return dispatch.dispatch(self, *plan.broadcast(self, key, x, root, out), async_op)

    def barrier(self, async_op: bool = False):
        """Return once every rank has entered the barrier."""
        p = self._barrier_plan
        if p is None:
            p = self._barrier_plan = plan.barrier(self)
        return dispatch.dispatch(self, p, None, None, async_op)

    def execute(self, p, seq: int, xa, oa, stream):
        """Run call ``seq`` of plan ``p`` now (dispatch.execute; for fast/program.py)."""
        return dispatch.execute(self, p, seq, xa, oa, stream)

    # ------------------------------------------------------------------ roads
    def road(self, collective: str, x=None, *, out=None, op: str = "sum", counts=None, root: int = 0):
        """Which road a call with these arguments takes, and why (roads.Choice), without
        running it. Where the road depends on every rank's buffers (the direct roads),
        the answer assumes every rank passes arrays like these."""
        return query(self, collective, x, out, op, counts, root)

    def road_taken(self) -> Road | None:
        """The road the latest call took (a direct road's, from its header post)."""
        p = self.last
        if p is None:
            return None
        if p.road in roads.DIRECT_ROADS and self.symmetric is not None:
            return self.symmetric.direct.road
        return p.road

    # ---------------------------------------------------------------- memory
    def alloc(self, shape, dtype=np.float32):
        """A numpy array in the node's symmetric heap: collectives on such arrays read
        peers' memory directly (collectives/symmetric). Every rank must call it, with
        the same shapes in the same order, and pass heap arrays on every rank.
        The arrays live until ``close()``, which unmaps them. Raises SharedMemoryError
        on every rank when the node's shared memory cannot hold it.

        Args:
          shape: the array's shape.
          dtype: a supported numpy dtype (see dtypes.py), or a torch dtype: then a CPU
            torch tensor over the same heap memory (the torch process group's
            collectives on it take the direct roads too).
        """
        if type(dtype).__module__ == "torch":  # the caller has torch imported already
            return tensor_in_heap(self.alloc, shape, dtype)
        dtype_code(np.dtype(dtype))
        if self.symmetric is None:
            self.symmetric = self.make_symmetric(stage=False)
            self.plans.clear()  # plans made before chose their road without the heap
            self._barrier_plan = None
            self._make_lane()
        a = self.symmetric.alloc(shape, dtype)
        self.shapes.clear()  # an address a plan knew may be in the heap now
        if self.lane is not None:  # an address the lane knew may be in the heap now
            fast_lane.spans(self, self.lane)
        return a

    def close(self) -> None:
        self.lane = self._lane = None
        super().close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<Communicator rank {self.rank}/{self.size} algorithm={self.algorithm}>"
