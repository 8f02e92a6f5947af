"""Collective benchmark in the style of nccl-tests: ring vs raw MPI, DeepSpeed, Gloo (vs NCCL) in one run.

    mpirun -n 4 python bench/collectives.py -b 1K -e 64M -f 4 \
        --op all_reduce,reduce_scatter,all_gather --dtype float32 --algorithm ring,mpi,mpi-api,deepspeed

Sizes follow nccl-tests: for all_reduce and reduce_scatter the size is the
whole input buffer; for all_gather it is the whole output buffer. A broadcast
runs in place on the output buffer for every algorithm, as MPI's Bcast does
(the root's data copied there before each round, outside the timing). Every
algorithm runs at every size before the next size, so drift in the machine
touches all of them alike. Inputs are small integers, so sums are exact in
any order and every result is checked (#wrong) before it is timed.

Bus bandwidth (busbw) = algbw x factor: 2(n-1)/n for all-reduce, (n-1)/n for
reduce-scatter and all-gather, 1 for broadcast (nccl-tests' convention).

Each size is timed in rounds with the algorithms taking turns (each going
first in turn); time is the median over rounds. At each size all algorithms
share one set of buffers, so they move the very same memory (the output is
reset before each algorithm's checked run). A "vs" column is the median over
rounds of the ratio within each round (paired): two timings taken back to back share the
machine's state, so on a noisy machine the paired ratio drifts far less
than a ratio of two separate medians (the JSON keeps both).

Baselines, as their users call them (bench/peers.py): ``--algorithm mpi`` is
mpi4py itself (``comm.Allreduce(x, out, op=MPI.SUM)``, ``Reduce_scatter_block``,
``Allgather``, ``Bcast``) on the same buffers; ``mpi-api`` is MPI's collective
behind our API (``Communicator(algorithm="mpi")``), so the cost of the API shows
beside it; ``deepspeed`` is DeepSpeed's CPU shared-memory all-reduce, its raw op
``torch.ops.deepspeed.inference_all_reduce_`` in place on a tensor over the output
array (all-reduce, SUM, float types; ``make bench-peers`` builds it, and where it
is missing the table says how). Every algorithm gets a paired ratio against
each of mpi, gloo and deepspeed that runs ("vs mpi", ...; JSON ``ratio_vs_mpi``,
``ratio_vs_gloo``, ``ratio_vs_deepspeed``).

``--in-place``: all-reduce with ``out`` as its input and all-gather from the
rank's own place in ``out``, for every algorithm (``MPI.IN_PLACE`` for raw MPI,
the output's own slice through torch), as torch's ``dist.all_reduce`` and FSDP2's
all-gathers call them; the input is copied there before the checked run and each
round, outside the timing.
``--fresh``: every call passes new views ``x[:]`` and ``out[:]`` of the same
buffers (a torch view for dist.* and DeepSpeed), as code that slices, reshapes or
reallocates per call hands them over; without it each algorithm reuses its
objects. ``--consume``: every timed call is followed by a read of its whole output (a sum
over ``out``), for every algorithm, as code that uses the result does: a call that
is fast because it leaves ``out`` out of cache (streaming stores) pays here.
``--breakdown``: after the sweep, where the microseconds of a small call
go (bench/breakdown.py): argument checks, header agreement, data movement, the
rest of our dispatch, and the torch layer. ``--async-op``: the torch and gloo
rows call ``async_op=True`` and wait on the work at once, as DDP and FSDP2 do
(through ringzero that takes the process group's Python methods, not its C++
calls).
``--algorithm gloo`` is torch.distributed's Gloo backend and ``--algorithm
torch`` our ring called through the ringzero ProcessGroup
(collectives/torch_backend.py), both on torch views of the same arrays
(torch is imported only for them). With torch and ring in one run, the
"torch-ring(us)" column is the group's per-call cost over the bare
Communicator, paired round by round; "torch-api(us)" is the share of it that
is torch's own (the same dist.* call on a group whose methods do nothing,
timed in each round), which every backend pays; the JSON's
``overhead_ours_us`` is the rest, the ringzero group's. torch's all-reduce and broadcast work in
place: they run on the output buffer, refilled from the input before each
round outside the timing (so torch-ring also holds the difference between
our in-place and out-of-place all-reduce, nothing at small sizes). torch runs
one intra-op thread per rank, as under torchrun: more spin in OpenMP and
slowed ring and MPI in the same run a hundredfold on this 2-core machine.

``--algorithm copy`` (bench/copy_floor.py) is the floor under every algorithm
here: each rank makes only the cross-process reads, copies and reductions the
collective cannot do without, with no synchronisation; where ring and mpi
both sit at its time ("vs copy" near 1), the case is bound by the copies both
must make. Its rows are not checked (#wrong "-").

``--algorithm ring,mpi,p2p`` adds the bare ring (bench/bare_ring.py): the
same ring with nothing but Isend, Irecv and numpy, the ceiling of any ring
over MPI point-to-point here. The JSON's ``ratio_vs_p2p`` on ring records
says how much of that ceiling our ring reaches.

``--symmetric``: the buffers every algorithm shares are views of two arrays
allocated once, for the largest size, with ``comm.alloc`` on our ring's
communicator (or the first of ours in the run), every rank in the same
order: they live in the node's symmetric heap (collectives/symmetric), so
the ring reads its peers' buffers directly, while MPI, Gloo and the bare
ring get the very same arrays (MPI's own collectives on heap memory, torch
through ``torch.from_numpy`` views). The header says which buffers ran and
whether our communicator stages ordinary arrays through the heap (by default
on two ranks of a node, up to per-collective limits; ``COLLECTIVES_STAGE=0``
never, ``=1`` at every size); every record carries ``buffers`` and ``stage``, and our communicators'
records ``path``: what the checked (untimed) call took, read from a trace of
that one call ("direct" when peers' buffers were read in place, "ring" when the ring
sent and received; "mpi" for the baseline). ``--algorithm torch`` runs on the ringzero
ProcessGroup's own Communicator, whose heap these arrays are not in: it takes
the ring on them.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import math
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from collectives import Communicator  # noqa: E402  (before mpi4py starts MPI: see collectives/__init__.py)
from mpi4py import MPI  # noqa: E402
from collectives.dtypes import to_dtype  # noqa: E402
from collectives.teach.trace import Tracer  # noqa: E402
from collectives.volumes import busbw_factor, memory_roofline  # noqa: E402

from bare_ring import BareRing  # noqa: E402  (bench/bare_ring.py)
from peers import DeepSpeedShm, RawMpi, as_tensor, deepspeed_missing, unsupported_mpi  # noqa: E402
from copy_floor import CopyFloor  # noqa: E402  (bench/copy_floor.py)

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
ALGORITHMS = ("ring", "mpi", "mpi-api", "nccl", "p2p", "gloo", "torch", "deepspeed", "copy")
BASELINES = ("mpi", "gloo", "deepspeed", "copy")  # every other algorithm gets a paired ratio against each one present
ONLY = {"deepspeed": ("all_reduce",)}
IN_PLACE_OPS = ("all_reduce", "all_gather")  # what --in-place changes (a broadcast is always in place)  # algorithms that serve some collectives only
SENTINEL = 127  # never a right answer everywhere: the inputs are in [-8, 8] and vary by element


def parse_size(text: str) -> int:
    units = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B") if text.strip().upper() not in ("B",) else "1"
    num = t.rstrip("KMG")
    return int(float(num) * units[t[len(num):]])


def sizes(begin: int, end: int, factor: float) -> list[int]:
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = int(s * factor) if factor > 1 else end + 1
    return out


def pattern(count: int, rank: int, dtype) -> np.ndarray:
    """Integer values in [-8, 8]: every sum over up to 256 ranks is exact in float16."""
    return (((np.arange(count, dtype=np.int64) * 7 + rank * 13) % 17) - 8).astype(dtype)


class Case:
    """One (op, dtype, size) for one algorithm: buffers, the call, and its check.

    ``like``: another algorithm's Case of the same (op, dtype, size), whose
    buffers this one shares. Every algorithm then moves the very same memory:
    with buffers of their own, whichever algorithm's were allocated first at a
    size measured up to 30% slower (two-rank all-gather at 16 MiB, in every
    order tried), which is the allocator's doing, not the algorithm's."""

    def __init__(self, comm, op, redop, dtype, nbytes, xp, like=None, pool=None, fresh=False, in_place=False):
        n, r = comm.size, comm.rank
        self.fresh = fresh
        self.in_place = in_place and op in IN_PLACE_OPS
        item = np.dtype(dtype).itemsize
        self.count = count = max(nbytes // item, 0)
        if op in ("reduce_scatter", "all_gather"):
            count -= count % n
            self.count = count
        self.nbytes = count * item
        self.comm, self.op, self.redop = comm, op, redop
        piece = count // n
        self.own = slice(r * piece, (r + 1) * piece)  # an in-place all-gather's input: its own place in out
        self.xp = xp
        if like is not None:
            self.x, self.out, self.expect = like.x, like.out, like.expect
            self.bind()
            return
        host_full = pattern(count, r, dtype)
        if op == "all_reduce":
            x, out_count = host_full, count
            self.expect = sum(pattern(count, q, np.float64) for q in range(n))
        elif op == "reduce_scatter":
            x, out_count = host_full, piece
            self.expect = sum(pattern(count, q, np.float64) for q in range(n))[r * piece:(r + 1) * piece]
        elif op == "all_gather":
            x, out_count = pattern(piece, r, dtype), count
            self.expect = np.concatenate([pattern(piece, q, np.float64) for q in range(n)]) if n else None
        else:  # broadcast from rank 0
            x, out_count = host_full, count
            self.expect = pattern(count, 0, np.float64)
        if pool is None:
            self.x, self.out = xp.asarray(x), xp.empty(out_count, dtype)
        else:  # views of the symmetric heap arrays, filled in place
            self.x, self.out = pool.x[:x.size], pool.out[:out_count]
            self.x[...] = x
        if op in ("all_reduce", "reduce_scatter") and redop == "avg":
            self.expect = np.trunc(self.expect / n) if np.dtype(dtype).kind == "i" else self.expect / n
        self.xp = xp
        self.bind()

    def bind(self) -> None:
        """Make ``self.call``, the zero-argument call that is timed: the peer's own
        (bench/peers.py) or ours, one closure layer either way."""
        caller = getattr(self.comm, "caller", None)
        self.call = caller(self, self.fresh) if caller is not None else self.caller(self.fresh)

    def caller(self, fresh: bool):
        c, op, x, out, redop = self.comm, self.op, self.x, self.out, self.redop
        if self.in_place:  # the input is out itself (all-reduce) or its own place in out (all-gather)
            x = out if op == "all_reduce" else out[self.own]
        if op == "all_reduce":
            f = c.all_reduce
            return (lambda: f(x[:], op=redop, out=out[:])) if fresh else (lambda: f(x, op=redop, out=out))
        if op == "reduce_scatter":
            f = c.reduce_scatter
            return (lambda: f(x[:], op=redop, out=out[:])) if fresh else (lambda: f(x, op=redop, out=out))
        if op == "all_gather":
            f = c.all_gather
            return (lambda: f(x[:], out=out[:])) if fresh else (lambda: f(x, out=out))
        f = c.broadcast  # in place on out, as MPI's Bcast (and torch's broadcast) has it
        return (lambda: f(out[:], root=0, out=out[:])) if fresh else (lambda: f(out, root=0, out=out))

    def prepare(self) -> None:
        """Set up what a timed round starts from (outside the timing): for a broadcast, which
        every algorithm runs in place on out, the root's data in out; with --in-place, the
        input in out (all-reduce) or in its own place there (all-gather)."""
        if (self.op == "broadcast" and self.comm.rank == 0) or (self.in_place and self.op == "all_reduce"):
            self.out[...] = self.x
        elif self.in_place:
            self.out[self.own] = self.x

    def run(self):
        self.call()

    def wrong(self) -> int:
        got = self.out.get() if hasattr(self.out, "get") else self.out
        return int(np.count_nonzero(got.astype(np.float64) != self.expect))


class TorchComm:
    """A torch.distributed group seen as the benchmark sees a communicator: rank, size, barrier, close."""

    def __init__(self, dist, group, name: str):
        self.dist, self.group, self.name = dist, group, name
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)

    def close(self) -> None:
        pass  # the groups go with dist.destroy_process_group() at the end


class TorchCase(Case):
    """A Case run through torch.distributed (Gloo, or our ring behind the ringzero ProcessGroup).

    The tensors are zero-copy views of the very arrays the other algorithms
    use. torch's all_reduce and broadcast have no output argument: they run
    in place on ``out``, which prepare() fills from ``x`` before the checked
    run and before each timed round, outside the timing (an in-place
    all-reduce repeated within a round sums sums: the values change, the
    bytes moved do not). reduce_scatter and all_gather are out of place, as ours."""

    REDOPS = {"sum": "SUM", "avg": "AVG", "max": "MAX", "min": "MIN", "prod": "PRODUCT"}

    def __init__(self, comm: TorchComm, op, redop, dtype, nbytes, xp, like=None, pool=None, fresh=False,
                 in_place=False, async_op=False):
        import torch

        self.tx = self.tout = None
        self.async_op = async_op  # each call async_op=True and waited on, as DDP and FSDP2 call
        super().__init__(comm, op, redop, dtype, nbytes, xp, like=like, pool=pool, fresh=fresh, in_place=in_place)
        self.dist, self.group = comm.dist, comm.group
        self.tx, self.tout = as_tensor(torch, self.x), as_tensor(torch, self.out)
        if self.in_place and op == "all_gather":  # the input is the output's own slice (FSDP2's form)
            self.tx = self.tout[self.own]
        self.top = getattr(self.dist.ReduceOp, self.REDOPS[redop])
        d = self.dist  # torch 2.13 names the tensor forms *_single; older torch *_tensor
        self.rs = getattr(d, "reduce_scatter_single", None) or d.reduce_scatter_tensor
        self.ag = getattr(d, "all_gather_single", None) or d.all_gather_into_tensor
        # the root's global rank, looked up once (a user writes src=0; the lookup is not the call's)
        self.src = d.get_global_rank(self.group, 0) if self.group is not None else 0

    def bind(self) -> None:
        self.call = self.run

    def prepare(self) -> None:
        if self.op == "all_reduce" or (self.op == "broadcast" and self.comm.rank == 0):
            self.out[...] = self.x
        elif self.in_place:
            self.out[self.own] = self.x

    def run(self, group=None):
        """One call through torch.distributed, on this case's group (or on ``group``:
        the no-op group that times torch's own share of a call); new views of the
        tensors with --fresh."""
        d, op, g = self.dist, self.op, self.group if group is None else group
        tout = self.tout[:] if self.fresh else self.tout
        tx = (self.tx[:] if self.fresh else self.tx) if op in ("reduce_scatter", "all_gather") else None
        a = self.async_op
        if op == "all_reduce":  # (in place: only the output is passed, so only it is made new)
            w = d.all_reduce(tout, op=self.top, group=g, async_op=a)
        elif op == "reduce_scatter":
            w = self.rs(tout, tx, op=self.top, group=g, async_op=a)
        elif op == "all_gather":
            w = self.ag(tout, tx, group=g, async_op=a)
        else:
            w = d.broadcast(tout, src=0 if group is not None else self.src, group=g, async_op=a)
        if w is not None:  # (the no-op group returns no work)
            w.wait()


class DeepSpeedCase(Case):
    """DeepSpeed's raw all-reduce, in place on a tensor over ``out`` (bench/peers.py), which
    prepare() fills from ``x`` before the checked run and each timed round, as for torch."""

    def __init__(self, comm, op, redop, dtype, nbytes, xp, like=None, pool=None, fresh=False, in_place=False):
        import torch

        Case.__init__(self, comm, op, redop, dtype, nbytes, xp, like=like, pool=pool, fresh=False)
        self.fresh = fresh
        self.tout = as_tensor(torch, self.out)
        self.call = comm.caller(self, fresh)

    def bind(self) -> None:
        pass  # the call needs the tensor: made in __init__

    def prepare(self) -> None:
        self.out[...] = self.x


class Missing:
    """An algorithm that cannot run here: ``why`` says how to get it (printed in place of its rows)."""

    def __init__(self, why: str):
        self.why = why

    def close(self) -> None:
        pass


class HeapPool:
    """--symmetric: two arrays in the node's symmetric heap, large enough for every size,
    that every Case views (input from ``x``, output from ``out``). Allocated once, on
    every rank in the same order: each ``alloc`` is a window that lives until the
    communicator closes, so one pair per size would hold every size's buffers at once.

    Args:
      comm: our Communicator whose heap holds them (``alloc`` is collective).
      nbytes: the largest size of the sweep.
      dtype: element type.
    """

    def __init__(self, comm, nbytes: int, dtype):
        count = max(nbytes // np.dtype(dtype).itemsize, 1)
        self.x = comm.alloc((count,), dtype)
        self.out = comm.alloc((count,), dtype)


def traced_path(comm, run, world) -> str:
    """Run ``run()`` once with a tracer on our ring communicator ``comm`` and say which path
    it took on every rank: "direct" when ranks read peers' buffers in place (trace phases
    "direct ..."), "ring" when they sent and received, "mixed" when ranks differ, "none"
    when no rank moved data (one rank). A rank that moved nothing (a direct broadcast's
    root) agrees with either."""
    saved, comm.tracer = comm.tracer, Tracer()
    try:
        run()
        phases = {str(e.get("phase", "")) for e in comm.tracer.data_events()}
    finally:
        comm.tracer = saved
    mine = "none" if not phases else "direct" if all(p.startswith("direct") for p in phases) else "ring"
    seen = set(world.allgather(mine)) - {"none"}
    return seen.pop() if len(seen) == 1 else "mixed" if seen else "none"


def consumer(call, out):
    """``call`` followed by a read of all of ``out`` (its sum), as code that uses the result does."""
    total = out.sum

    def run():
        call()
        total()
    return run


def paired_ratio(base_times: list[float], times: list[float]) -> float:
    """Median over rounds of base/this, each pair timed back to back in one round."""
    return float(np.median([b / t for b, t in zip(base_times, times)]))


_torch_groups: dict = {}


def make_comm(alg: str, world, kw: dict, want_ringzero: bool = False):
    """The communicator an algorithm runs on: ours, MPI's, the bare ring, or a torch group.

    Args:
      want_ringzero: the run also asks for "torch" (the torch groups are made once, all together).
    """
    if alg == "p2p":
        return BareRing(world)
    if alg == "mpi":  # mpi4py itself
        return RawMpi(world)
    if alg == "copy":
        return CopyFloor(world)
    if alg == "deepspeed":
        why = deepspeed_missing()
        return Missing(why) if why else DeepSpeedShm(world)
    if alg in ("gloo", "torch"):
        import torch.distributed as dist

        if alg not in _torch_groups:  # bench/torch_groups.py; "torch" is our ring behind the ringzero group
            from torch_groups import init_groups

            groups = init_groups(world, ringzero=want_ringzero)
            _torch_groups.update({"gloo": groups["gloo"], "torch": groups.get("ringzero")})
        return TorchComm(dist, _torch_groups[alg], alg)
    # Our ring keeps its safety header on; MPI behind our API runs without it (mpi-api).
    return Communicator(algorithm="mpi" if alg == "mpi-api" else alg, verify=(alg == "ring"), **kw)


MAX_ITERS = 5000  # iterations a timed block, at the most


def block_iters(case, a, world) -> int:
    """Iterations per timed block for this case: at least ``-n``, more when a call is
    so fast that ``-n`` of them take less than ``--block-ms`` (the slowest rank's
    estimate, so every rank runs the same count)."""
    if a.block_ms <= 0:
        return a.iters
    per = []

    def estimate(k):
        t0 = time.perf_counter()
        for _ in range(k):
            case.run()
        if a.device == "cuda":
            import cupy
            cupy.cuda.runtime.deviceSynchronize()
        per.append((time.perf_counter() - t0) / k)
        return world.allreduce(min(per), op=MPI.MAX)

    # the best of the estimates: a first call can pay a one-time cost (a lazy init), and a group's
    # first calls can take a millisecond where later ones take microseconds; calls under 5 ms get a
    # third look (every rank decides on the same agreed figure, so all run the same calls)
    estimate(3)
    per_call = estimate(5)
    if per_call < 5e-3:
        per_call = estimate(9)
    return int(min(max(a.iters, math.ceil(a.block_ms * 1e-3 / max(per_call, 1e-9))), MAX_ITERS))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-b", "--minbytes", default="1K", help="smallest size (K, M, G suffixes)")
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size")
    p.add_argument("-f", "--stepfactor", type=float, default=4, help="multiply the size by this")
    p.add_argument("-w", "--warmup_iters", type=int, default=3)
    p.add_argument("-n", "--iters", type=int, default=20,
                   help="iterations per timed block, at least (see --block-ms)")
    p.add_argument("--block-ms", type=float, default=2.0,
                   help="more iterations for fast calls, so that each timed block lasts about this long (as "
                        "OSU's benchmarks run small messages more often): a block of 20 calls of a few us "
                        "measures the ranks' skew at the barrier and the caches' warm-up after the other "
                        "algorithms' turns more than the calls; 0: -n iterations always")
    p.add_argument("-r", "--rounds", type=int, default=9,
                   help="time the iterations this many times, algorithms taking turns; report the median")
    p.add_argument("--op", default="all_reduce,reduce_scatter,all_gather", help=f"comma list of {OPS}")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--redop", default="sum")
    p.add_argument("--algorithm", default="ring,mpi",
                   help="comma list of ring, mpi (mpi4py itself), mpi-api (MPI behind our API), nccl, p2p (the "
                        "bare ring: see bench/bare_ring.py), gloo (torch.distributed's Gloo), torch (our ring "
                        "through the ringzero ProcessGroup), deepspeed (its CPU shared-memory all-reduce)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--chunk-bytes", type=int, default=None, help="ring chunk size (default: library's)")
    p.add_argument("--json", default=None, help="write the records here (rank 0)")
    p.add_argument("--plot", default=None, help="draw busbw against size to this PNG (rank 0)")
    p.add_argument("--symmetric", action="store_true",
                   help="buffers from comm.alloc (the node's symmetric heap), shared by every algorithm:"
                        " the ring reads peers' buffers directly")
    p.add_argument("--fresh", action="store_true",
                   help="pass new views x[:] and out[:] of the buffers on every call (what code that slices or "
                        "reallocates per call hands over), for every algorithm")
    p.add_argument("--consume", action="store_true",
                   help="after every timed call, read the whole output (a sum over out), as code that uses the "
                        "result does, for every algorithm: a call that leaves out in cache or evicts it shows here")
    p.add_argument("--in-place", action="store_true",
                   help="all-reduce with out as its input, all-gather with the input in its own place in out, "
                        "for every algorithm (MPI.IN_PLACE for raw MPI), as torch and FSDP2 call them")
    p.add_argument("--breakdown", action="store_true",
                   help="after the sweep: where a small call's time goes (bench/breakdown.py)")
    p.add_argument("--async-op", action="store_true",
                   help="torch and gloo rows: every dist.* call with async_op=True, waited on at once (DDP's and "
                        "FSDP2's form, which takes the process group's Python methods)")
    a = p.parse_args(argv)

    world = MPI.COMM_WORLD
    ops = [o for o in a.op.split(",") if o]
    algos = [x for x in a.algorithm.split(",") if x]
    for o in ops:
        if o not in OPS:
            p.error(f"unknown --op {o}; choose from {', '.join(OPS)}")
    if "p2p" in algos and a.device != "cpu":
        p.error("--algorithm p2p (the bare ring) runs on host arrays only: use --device cpu")
    unknown = [x for x in algos if x not in ALGORITHMS]
    if unknown:
        p.error(f"unknown --algorithm {','.join(unknown)}; choose from {', '.join(ALGORITHMS)}")
    torch_algos = [x for x in algos if x in ("gloo", "torch")]
    if a.async_op and not torch_algos:
        p.error("--async-op applies to the torch.distributed rows: add --algorithm torch or gloo")
    if torch_algos and a.device != "cpu":
        p.error(f"--algorithm {','.join(torch_algos)} runs on host arrays only here: use --device cpu")
    if "gloo" in algos and a.redop == "avg":
        p.error("Gloo has no avg reduction: use --redop sum (or leave gloo out)")
    if a.symmetric and a.device != "cpu":
        p.error("--symmetric allocates host arrays in the node's shared-memory heap: use --device cpu")
    if a.symmetric and not any(x in ("ring", "mpi-api") for x in algos):
        p.error("--symmetric allocates through our communicator: add ring or mpi-api to --algorithm")
    if "mpi" in algos:
        if a.device != "cpu":
            p.error("--algorithm mpi (mpi4py itself) runs on host arrays here: use --device cpu or mpi-api")
        why = unsupported_mpi(a.dtype, a.redop)
        if why:
            p.error(why)
    if "deepspeed" in algos and (a.device != "cpu" or a.redop != "sum" or a.dtype not in
                                 ("float32", "bfloat16", "float16")):
        p.error("--algorithm deepspeed all-reduces CPU tensors of float32, bfloat16 or float16 with --redop sum")
    dtype = to_dtype(a.dtype)
    if a.device == "cuda":
        import cupy as xp
        xp.cuda.Device(world.rank % xp.cuda.runtime.getDeviceCount()).use()
    else:
        xp = np
    kw = {} if a.chunk_bytes is None else {"chunk_bytes": a.chunk_bytes}
    comms = {alg: make_comm(alg, world, kw, want_ringzero="torch" in algos) for alg in algos}
    n, rank = world.size, world.rank
    noop = None
    if "torch" in algos and "ring" in algos:
        from torch_groups import noop_group

        noop = noop_group(rank, n)
    records = []
    pool = None
    if a.symmetric:  # on ring's communicator, so that its heap is the one the ring reads
        owner = comms["ring"] if "ring" in comms else comms["mpi-api"]
        pool = HeapPool(owner, max(sizes(parse_size(a.minbytes), parse_size(a.maxbytes), a.stepfactor),
                                   default=1), dtype)
    ours = next((c for c in comms.values() if isinstance(c, Communicator) and c.algorithm == "ring"), None)
    stage = bool(ours is not None and ours.symmetric is not None and ours.symmetric.stage)
    mode = "symmetric" if a.symmetric else "numpy"

    def say(s=""):
        if rank == 0:
            print(s, flush=True)

    say(f"# ringzero collectives benchmark: {n} ranks, dtype {a.dtype}, redop {a.redop}, device {a.device}")
    if a.symmetric:
        say(f"# buffers: symmetric (comm.alloc on {'ring' if 'ring' in comms else 'mpi-api'}'s communicator,"
            f" the node's shared-memory heap), the same arrays for every algorithm")
    else:
        say(f"# buffers: numpy ({'cupy' if a.device == 'cuda' else 'ordinary host'} arrays), the same arrays"
            f" for every algorithm")
    say(f"# COLLECTIVES_STAGE={os.environ.get('COLLECTIVES_STAGE', '')}"
        + {"1": ": ordinary host arrays staged through symmetric scratch (direct path) at every size",
           "0": ": ordinary arrays take the ring"}.get(os.environ.get("COLLECTIVES_STAGE", ""),
                                                       " (unset: ordinary host arrays staged up to each collective's"
                                                       " limit, the ring above; docs/symmetric.md)" if stage else
                                                       " (unset: not staged here, ordinary arrays take the ring)"))
    missing = {alg: c.why for alg, c in comms.items() if isinstance(c, Missing)}
    for alg, why in missing.items():
        say(f"# {alg}: no rows ({why})")
    algos = [x for x in algos if x not in missing]
    baselines = [b for b in BASELINES if b in algos]
    overhead = "torch" in algos and "ring" in algos
    say(f"# calls: {'fresh views x[:] and out[:] on every call (--fresh)' if a.fresh else 'the same objects every call'}"
        + ("; all-reduce and all-gather in place (--in-place)" if a.in_place else "")
        + ("; dist.* calls async_op=True, each waited on (--async-op)" if a.async_op else "")
        + ("; out read (summed) after every call (--consume)" if a.consume else ""))
    say(f"# warmup {a.warmup_iters}, {a.rounds} rounds of {a.iters} iters"
        + (f" (more for fast calls: about {a.block_ms:g} ms a block, at most {MAX_ITERS})" if a.block_ms > 0 else "")
        + ", algorithms taking turns each round; time = median over rounds of (max over ranks of the mean per"
          " iteration)")
    if baselines:
        say(f"# {', '.join('vs ' + b for b in baselines)}: median over rounds of the paired busbw ratio"
            f" (baseline's time / this algorithm's time in the same round; > 1 is faster)")
    if overhead:
        say("# torch-ring(us): median over rounds of the paired per-call time difference, the ringzero"
            " ProcessGroup's cost over calling the Communicator directly")
        say("# torch-api(us): the same dist.* call on a group that does nothing (bench/torch_groups.py"
            " noop_group), timed in each round: torch's own share of torch-ring, which every backend pays")
    say(f"# busbw = algbw x {{all_reduce: 2(n-1)/n = {busbw_factor('all_reduce', n):.3f}, "
        f"reduce_scatter/all_gather: (n-1)/n = {busbw_factor('all_gather', n):.3f}}}")
    hdr = (f"{'op':>14} {'size(B)':>11} {'count':>10} {'type':>8} {'redop':>5} {'algorithm':>9} "
           f"{'time(us)':>10} {'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>6}"
           + "".join(f" {'vs ' + b:>8}" for b in baselines)
           + (f" {'torch-ring(us)':>14} {'torch-api(us)':>12}" if overhead else ""))
    everyone = algos
    for op in ops:
        algos = [x for x in everyone if op in ONLY.get(x, OPS)]
        say()
        say(hdr)
        for x in everyone:
            if x not in algos:
                say(f"# {x}: no {op} (it serves {', '.join(ONLY[x])} only)")
        for size in sizes(parse_size(a.minbytes), parse_size(a.maxbytes), a.stepfactor):
            row, cases, times, iters = {}, {}, {alg: [] for alg in algos}, {}
            api = []  # --algorithm torch: per round, the same dist.* call on a group that does nothing
            for alg in algos:
                first = cases[algos[0]] if cases else None
                kind = TorchCase if alg in ("gloo", "torch") else DeepSpeedCase if alg == "deepspeed" else Case
                more = dict(async_op=a.async_op) if kind is TorchCase else {}
                case = cases[alg] = kind(comms[alg], op, a.redop, dtype, size, xp, like=first, pool=pool,
                                         fresh=a.fresh, in_place=a.in_place, **more)
                case.out[...] = SENTINEL  # shared buffers: a result left by the last algorithm must not count
                case.prepare()
                c = comms[alg]
                if isinstance(c, Communicator) and c.algorithm == "ring":
                    path = traced_path(c, case.run, world)
                else:
                    path = "mpi" if isinstance(c, Communicator) else None
                    case.run()
                unchecked = getattr(c, "unchecked", False)  # the copy floor: not a collective's result
                wrong = 0 if unchecked else world.allreduce(case.wrong(), op=MPI.SUM)
                for _ in range(a.warmup_iters):
                    case.run()
                iters[alg] = block_iters(case, a, world)
                row[alg] = {"wrong": wrong, "path": path, "checked": not unchecked}
            for rnd in range(max(a.rounds, 1)):  # algorithms take turns, so drift touches all alike,
                for alg in algos[rnd % len(algos):] + algos[:rnd % len(algos)]:  # each going first in turn
                    case = cases[alg]
                    case.prepare()
                    comms[alg].barrier()
                    world.Barrier()
                    k, call = iters[alg], case.call
                    if a.consume:  # the result read by its user after each call
                        call = consumer(case.call, case.out)
                    t0 = time.perf_counter()
                    for _ in range(k):
                        call()
                    if a.device == "cuda":
                        xp.cuda.runtime.deviceSynchronize()
                    times[alg].append(world.allreduce((time.perf_counter() - t0) / max(k, 1), op=MPI.MAX))
                    if alg == "torch" and overhead:  # torch's own share of a call
                        t0 = time.perf_counter()
                        for _ in range(k):
                            case.run(group=noop)
                        api.append(world.allreduce((time.perf_counter() - t0) / max(k, 1), op=MPI.MAX))
            for alg in algos:
                case, dt = cases[alg], float(np.median(times[alg]))
                algbw = case.nbytes / dt / 1e9
                rec = dict(op=op, algorithm=alg, dtype=a.dtype, redop=a.redop, bytes=case.nbytes,
                           count=case.count, ranks=n, time_us=dt * 1e6, algbw=algbw,
                           busbw=algbw * busbw_factor(op, n), wrong=row[alg]["wrong"], device=a.device,
                           rounds_us=[t * 1e6 for t in times[alg]], iters=iters[alg], buffers=mode, stage=stage,
                           fresh=a.fresh, in_place=a.in_place, consume=a.consume)
                if alg in ("gloo", "torch"):
                    rec["async_op"] = a.async_op
                if row[alg]["path"] is not None:
                    rec["path"] = row[alg]["path"]
                if not row[alg]["checked"]:
                    rec["checked"] = False
                row[alg] = rec
                records.append(rec)
            for alg, rec in row.items():
                cols = []
                for b in baselines:
                    if alg == b:
                        cols.append("-")
                        continue
                    if b not in algos:  # it does not serve this collective
                        cols.append("n/a")
                        continue
                    # busbw ratio = time ratio, round by round
                    rec[f"ratio_vs_{b}"] = paired_ratio(times[b], times[alg])
                    rec[f"ratio_of_medians_vs_{b}"] = row[b]["time_us"] / rec["time_us"]  # busbw 0 at n = 1
                    rec[f"{b}_rounds_us"] = [t * 1e6 for t in times[b]]
                    cols.append(f"{rec[f'ratio_vs_{b}']:.2f}x")
                if "mpi" in baselines and alg != "mpi":
                    rec["ratio_of_medians"] = rec["ratio_of_medians_vs_mpi"]  # the older name
                if alg == "ring" and "p2p" in row:  # how far our ring is from the bare one
                    rec["ratio_vs_p2p"] = paired_ratio(times["p2p"], times[alg])
                if overhead:
                    cols.append("-")
                    if alg == "torch":
                        rec["overhead_vs_ring_us"] = float(np.median(
                            [(t - r) * 1e6 for t, r in zip(times["torch"], times["ring"])]))
                        cols[-1] = f"{rec['overhead_vs_ring_us']:+.1f}"
                        if api:
                            rec["torch_api_us"] = float(np.median(api)) * 1e6
                            rec["overhead_ours_us"] = rec["overhead_vs_ring_us"] - rec["torch_api_us"]
                        cols.append(f"{rec['torch_api_us']:.1f}" if api else "-")
                    else:
                        cols.append("-")
                say(f"{op:>14} {rec['bytes']:>11} {rec['count']:>10} {a.dtype:>8} "
                    f"{a.redop if op in ('all_reduce', 'reduce_scatter') else 'none':>5} {alg:>9} "
                    f"{rec['time_us']:>10.1f} {rec['algbw']:>11.3f} {rec['busbw']:>11.3f} "
                    f"{rec['wrong'] if rec.get('checked', True) else '-':>6}" + "".join(f" {c:>8}" for c in cols[:len(baselines)])
                    + (f" {cols[-2]:>14} {cols[-1]:>12}" if overhead else ""))
    algos = everyone
    say()
    total_wrong = sum(r["wrong"] for r in records)
    for alg in algos:
        bw = [r["busbw"] for r in records if r["algorithm"] == alg]
        if bw:
            say(f"# {alg}: avg bus bandwidth {np.mean(bw):.3f} GB/s over {len(bw)} cases")
    for alg in algos:  # the acceptance reads "at least Nx at every size": the worst case, and where
        for b in baselines:
            rs = [r for r in records if r["algorithm"] == alg and f"ratio_vs_{b}" in r]
            if rs:
                w = min(rs, key=lambda r: r[f"ratio_vs_{b}"])
                say(f"# {alg} vs {b}: lowest paired ratio {w[f'ratio_vs_{b}']:.2f}x ({w['op']}, {w['bytes']} B)")
    over = [r for r in records if "overhead_vs_ring_us" in r]
    if over:
        smallest = min(r["bytes"] for r in over)
        say("# torch over ring at " + f"{smallest} B: " + ", ".join(
            f"{r['op']} {r['overhead_vs_ring_us']:+.1f} us (torch's API {r['torch_api_us']:.1f}, the group "
            f"{r['overhead_ours_us']:+.1f})" if "torch_api_us" in r else f"{r['op']} {r['overhead_vs_ring_us']:+.1f} us"
            for r in over if r["bytes"] == smallest))
    traced = [r for r in records if r.get("path") in ("direct", "ring")]
    if traced:
        direct = sum(r["path"] == "direct" for r in traced)
        say(f"# ring path ({mode} buffers): direct reads in {direct} of {len(traced)} cases")
    say(f"# out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
    membw = None
    if a.plot:  # the roofline, measured in this process after the sweep (rank 0 alone: nothing else runs)
        from membw import measure_membw  # bench/membw.py

        if rank == 0:
            membw = measure_membw()
            say(f"# memory bandwidth (copy, read + write), measured now: {membw:.2f} GB/s")
            for op in ops:  # what memory alone allows each collective (collectives/volumes.py), and each algorithm
                roof = memory_roofline(op, n, membw)  # at the top size: where the roofline, not the code, bounds a ratio
                top = [r for r in records if r["op"] == op and r["bytes"] == max(q["bytes"] for q in records)]
                say(f"# memory roofline of {op} on {n} ranks (each input read once, each output written once): "
                    f"{roof:.2f} GB/s busbw" + (f"; at {top[0]['bytes']} B: " if top else "") + ", ".join(
                        f"{r['algorithm']} {r['busbw']:.2f} GB/s = {r['busbw'] / roof:.0%}" for r in top))
        for r in records:
            r["membw_gbps"] = membw
            r["roofline_gbps"] = memory_roofline(r["op"], n, membw) if membw else None
    if a.breakdown:
        from breakdown import breakdown  # bench/breakdown.py

        extra = breakdown(world, ops, [s_ for s_ in sizes(parse_size(a.minbytes), parse_size(a.maxbytes),
                                                          a.stepfactor) if s_ <= 64 * 1024] or [1024],
                          dtype, a.redop, rounds=max(a.rounds, 3), comms=comms, say=say)
        records.extend(extra)
    if rank == 0 and a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(records, f, indent=1)
        print(f"# wrote {len(records)} records to {a.json}")
    if a.plot and rank == 0:
        from plot import plot_busbw  # bench/plot.py

        plot_busbw([r for r in records if not r.get("breakdown")], a.plot, membw_gbps=membw)
        print(f"# wrote {a.plot}")
    for c in comms.values():
        c.close()
    if any(alg in ("gloo", "torch") for alg in algos):
        case = first = c = noop = None  # (what holds a group: the cases and comms end inside)
        end_torch_groups(cases, comms)
    return 1 if total_wrong else 0


def end_torch_groups(cases: dict, comms: dict) -> None:
    """Destroy the torch groups while the last cases' tensors still live. A Gloo worker
    thread that drops a finished call's tensors after Python began to shut down needs the
    GIL for them and aborts the process ("terminate called without an active exception"):
    so nothing here holds a group, the groups go (their destructors join the workers),
    and only then do the tensors."""
    import torch.distributed as dist

    keep = [(getattr(c, "tx", None), getattr(c, "tout", None)) for c in cases.values()]
    cases.clear()
    comms.clear()
    _torch_groups.clear()
    dist.destroy_process_group()
    gc.collect()
    del keep


if __name__ == "__main__":
    sys.exit(main())
