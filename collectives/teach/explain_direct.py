"""explain's direct path: the real direct algorithms (symmetric/direct.py) and their
real signals (symmetric/signals.py) on simulated ranks, over a stand-in heap
(stand_in_heap.py: the ranks are threads of one process, so a window is one
numpy array per rank that every thread can see). Driving the real code (rather than re-deriving its schedule)
means that what explain shows is what runs: the header agreement, the
flags, which rank reads which bytes of whose buffer, and the two phases of
a large all-reduce (one phase up to the tuning table's one_phase_bytes;
above, with every out in the heap, each rank writes its reduced segment into
every out). The reads are
recorded by the code's own trace events (phase "direct ..."), checked
against ``volumes.direct_volumes`` and every result against numpy.

Ordinary arrays (``private``) take the roads they take under mpirun: "stage"
copies each rank's input into its half of the stage window (stage.py), where
peers read it as a heap input; "read" has peers copy it straight out of the
owner's memory with ``process_vm_readv`` (cma.py; the all-reduce's
``read_in_place``). The simulated ranks are threads of one process, so there
the kernel copies within it, from the address the owner posted, as it copies
between processes.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import numpy as np

from ..context import Context
from ..dtypes import DATA_COLLECTIVES, OPS as OP_CODES, dtype_code
from .explain_run import Check
from ..safety.header import ALGORITHMS, COLLECTIVES, make_header
from ..kernels import NUMPY_KERNELS
from ..host.schedule import offsets, split_counts
from .simulate import simulate
from .stand_in_heap import StandInHeap, StandInNode
from .. import roads
from ..fast.codes import has_c
from ..roads import Facts, Road
from ..symmetric import cma
from ..symmetric.direct import Direct
from ..symmetric.signals import Signals
from ..tuning import defaults, load
from ..waiting import WaitPolicy
from .trace import Tracer
from ..volumes import direct_volumes

OPS = DATA_COLLECTIVES


@dataclass
class DirectRun:
    """One direct collective on simulated ranks: inputs, outputs, and the recorded reads."""

    op: str
    world: int
    counts: list  # the segments the direct path cuts (what the formulas use)
    dtype: np.dtype
    root: int
    one_phase: bool
    tracer: Tracer
    inputs: list
    outputs: list = field(default_factory=list)
    pipe: int = 0  # the pipe's chunk in bytes when the run went through it (private arrays), else 0
    private: str = ""  # ordinary arrays: "stage" (copied into the stage window) or "read" (process_vm_readv)
    chunk: int = 0  # "read": the all-reduce's chunk in bytes (cma_chunk_bytes)
    staged: list = field(default_factory=list)  # per rank: some input was staged in its call (Direct.staged)
    offered: list = field(default_factory=list)  # per rank: it offered its input in place (Direct.offered)

    @property
    def nbytes(self) -> int:
        return sum(self.counts) * self.dtype.itemsize


def direct_counts(op: str, world: int, count: int, dtype, counts=None, private: str = "") -> tuple[list[int], bool]:
    """The segments the direct path cuts and whether an all-reduce takes one phase.
    All-reduce: 64-byte aligned segments, as symmetric/allreduce.py cuts them (if
    the two rules drift apart, the byte check below fails); the others: ``counts``
    or an even split."""
    dt = np.dtype(dtype)
    if op == "all_reduce":
        # the road table's rule for explain's layout: every input in one heap window, every out in
        # another (never in place), nothing staged; staged, every input; read in place: two phases
        staged = private == "stage"
        f = Facts("all_reduce", count * dt.itemsize, count * dt.itemsize, dt, "sum", world, direct=True,
                  staged=staged, pushable=not staged, overlap=False)
        one_phase = private != "read" and roads.choose(f, _tuning(private, 0)).road is Road.ONE_PHASE
        return split_counts(count, world, max(1, 64 // dt.itemsize)), one_phase
    return (list(counts) if counts is not None else split_counts(count, world)), False


def _tuning(private: str, chunk: int):
    """The tuning a run takes: the defaults; staged at every size ("stage"); read in place
    from the first byte, the all-reduce in chunks of ``chunk`` bytes ("read")."""
    if private == "stage":
        return load({}, stage="1")
    if private == "read":
        return load({}, cma_min_all_reduce=1, cma_min_bytes=1, **({"cma_chunk_bytes": chunk} if chunk else {}))
    return defaults()


@functools.lru_cache(maxsize=None)
def _can_read_in_place() -> bool:
    """Whether this kernel lets a process read its own memory with process_vm_readv."""
    if cma._readv is None:
        return False
    want, got = np.arange(8, dtype=np.int64), np.zeros(8, np.int64)
    try:
        cma.read(got, cma.Remote(os.getpid(), cma.address(want), want.nbytes, 0))
    except OSError:
        return False
    return bool((got == want).all())


def run_direct(op: str, world: int, count: int, *, dtype: str = "float32", root: int = 0,
               counts: list[int] | None = None, timeout: float = 30.0, pipe: int = 0, private: str = "",
               chunk: int = 0) -> DirectRun:
    """Run one direct collective on ``world`` simulated ranks over a stand-in heap.

    Args:
      op: all_reduce, reduce_scatter, all_gather or broadcast.
      world: number of simulated ranks.
      count: elements of the whole buffer (ignored when ``counts`` is given).
      dtype: element type.
      root: broadcast root.
      counts: elements per rank (reduce-scatter, all-gather; uneven allowed).
      timeout: each rank's deadline, in seconds.
      pipe: private arrays (ordinary ones, not in the heap) through the pipe
        (symmetric/pipe.py) in chunks of this many bytes (whole 64-byte lines);
        0: every buffer in the heap. All-reduce and all-gather only.
      private: ordinary arrays, "stage" (each input copied into its rank's stage
        window, read there: symmetric/stage.py) or "read" (read in place with
        process_vm_readv: symmetric/cma.py; all-reduce, all-gather, broadcast);
        "": every buffer in the heap.
      chunk: "read": the all-reduce's chunk in bytes (the tuning's cma_chunk_bytes;
        0: its default).
    """
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")
    if pipe:
        if op not in ("all_reduce", "all_gather"):
            raise ValueError(f"the pipe runs all-reduces and all-gathers, not {op}")
        if not has_c():
            raise ValueError("the pipe runs in C (csrc/pipe.c), and the extension was not built")
        pipe = max(64, -(-pipe // 64) * 64)
    if private not in ("", "stage", "read") or (private and pipe):
        raise ValueError(f"private is '', 'stage' or 'read' (and not with the pipe); got {private!r}")
    if private == "read":
        if op == "reduce_scatter":
            raise ValueError("read in place serves all_reduce, all_gather and broadcast: a reduce-scatter of "
                             "ordinary arrays is staged (--algorithm stage) or goes over messages")
        if not _can_read_in_place():
            raise ValueError("this kernel refuses process_vm_readv (not Linux, or a ptrace restriction): "
                             "ordinary arrays are staged here")
    if chunk and (private != "read" or op != "all_reduce"):
        raise ValueError("chunk applies to the all-reduce read in place only (pieces are read whole)")
    if world < 1 or not 0 <= root < world:
        raise ValueError(f"bad world={world} or root={root}")
    if counts is not None and (op not in ("reduce_scatter", "all_gather") or len(counts) != world
                               or min(counts) < 0):
        raise ValueError(f"counts must be {world} numbers >= 0, for reduce_scatter or all_gather; got {counts}")
    dt = np.dtype(dtype)
    segs, one_phase = direct_counts(op, world, count if counts is None else sum(counts), dt, counts, private)
    n = sum(segs)
    node, tracer = StandInNode(world, timeout), Tracer()
    value = [10 ** r if world <= 8 else r + 1 for r in range(world)]
    each = (chunk or _tuning(private, 0).cma_chunk_bytes) if private == "read" else 0
    result = DirectRun(op, world, segs, dt, root, one_phase and not pipe, tracer,
                       [np.full(segs[r] if op == "all_gather" else n, value[r], dt) for r in range(world)],
                       [None] * world, pipe, private, each, [False] * world, [False] * world)
    label = f"{op} #0"

    def body(comm):
        r = comm.rank
        heap = StandInHeap(node, r)
        t = defaults()
        sig = Signals(heap, list(range(world)), WaitPolicy(t, True, True))
        if pipe:  # private arrays, and the pipe from the first byte, in chunks of ``pipe`` bytes
            direct = Direct(heap, sig, load({}, pipe_chunk_bytes=pipe), {op: Road.PIPE})
            x, out = result.inputs[r].copy(), np.empty(n, dt)
        elif private:  # ordinary arrays, as a caller's numpy arrays are
            direct = Direct(heap, sig, _tuning(private, chunk))
            if private == "read":  # every rank's pid: the same process here
                direct.pids = [os.getpid()] * world
            x, out = result.inputs[r].copy(), np.empty(segs[r] if op == "reduce_scatter" else n, dt)
        else:
            direct = Direct(heap, sig, t)
            x = heap.alloc(result.inputs[r].shape, dt)  # every rank allocates alike, in the same order
            x[...] = result.inputs[r]
            out = heap.alloc((segs[r] if op == "reduce_scatter" else n,), dt)
        hdr = make_header(0, COLLECTIVES[op], OP_CODES["sum"] if op in ("all_reduce", "reduce_scatter") else 0,
                          dtype_code(dt), n, 0, root if op == "broadcast" else 0, ALGORITHMS["ring"], 0, 0, 0)
        ctx = Context(comm.transport, NUMPY_KERNELS, label, timeout, 1, None, tracer)
        tracer.begin(label, rank=r)
        if op == "all_reduce":
            direct.all_reduce(ctx, hdr, x, out, "sum", heap.locate(x), heap.locate(out))
        elif op == "reduce_scatter":
            direct.reduce_scatter(ctx, hdr, x, out, segs, "sum", heap.locate(x))
        elif op == "all_gather":
            direct.all_gather(ctx, hdr, x, out, segs, heap.locate(x), oloc=heap.locate(out))
        else:
            direct.broadcast(ctx, hdr, x, out, root, heap.locate(x))
        tracer.end(label, rank=r)
        result.outputs[r] = out.copy()
        result.staged[r], result.offered[r] = bool(direct.staged), bool(direct.offered)

    simulate(world, body, timeout=timeout)
    return result


def expected_reads(run: DirectRun):
    """volumes.direct_volumes for this run: per rank (read by peers, read from peers, formulas)."""
    return direct_volumes(run.op, run.counts, run.dtype.itemsize, run.root, run.one_phase)


def reference(run: DirectRun) -> list[np.ndarray]:
    """What every rank should hold at the end, from numpy."""
    offs = offsets(run.counts)
    if run.op == "all_gather":
        return [np.concatenate(run.inputs)] * run.world
    if run.op == "broadcast":
        return [run.inputs[run.root]] * run.world
    total = np.sum(np.stack(run.inputs), axis=0, dtype=run.dtype)
    if run.op == "all_reduce":
        return [total] * run.world
    return [total[offs[r]:offs[r + 1]] for r in range(run.world)]


PHASES = {"direct read": "every rank reduces the whole vector, reading every peer's input in rank order",
          "direct reduce-scatter": "each rank reduces its own segment, reading it from every peer's input",
          "direct all-gather": "each rank gets every peer's piece: copies it (in an all-reduce: a peer's"
                               " reduced segment, once the peer's flag says REDUCED), or, when every out is"
                               " in the heap (all-reduces; all-gathers from 1 MiB), the owner writes its"
                               " segment or piece into every out, from cache",
          "direct broadcast": "every rank but the root copies the root's buffer",
          "pipelined reduce-scatter": "chunk by chunk, each rank copies its chunks of every peer's segment into"
                                      " its slots in shared memory; each rank reduces its own segment from its"
                                      " input and the peers' slots, in rank order, and streams it into its out",
          "pipelined all-gather": "each rank streams every peer's chunks into its out from the peer's slots"
                                  " (in an all-reduce: the reduced ones), while they are still in cache"}


def expected_phases(run: DirectRun) -> list[str]:
    """The phases that read bytes, in order (none on one rank or with nothing to move)."""
    if run.world == 1 or run.nbytes == 0:
        return []
    if run.pipe:
        return (["pipelined reduce-scatter"] if run.op == "all_reduce" else []) + ["pipelined all-gather"]
    return {"all_reduce": ["direct read"] if run.one_phase else ["direct reduce-scatter", "direct all-gather"],
            "reduce_scatter": ["direct reduce-scatter"], "all_gather": ["direct all-gather"],
            "broadcast": ["direct broadcast"]}[run.op]


def direct_checks(run: DirectRun) -> list:
    """Bytes each rank read and had read (trace against volumes.direct_volumes), that
    nothing was sent, the phases, and every result against numpy."""
    got, want = run.tracer.totals(), expected_reads(run)
    given = {}
    for (src, _), nbytes in run.tracer.links(side="recv").items():
        given[src] = given.get(src, 0) + nbytes
    out = []
    for r in range(run.world):
        read, was_read = got.get(r, {"recv": 0})["recv"], given.get(r, 0)
        out.append(Check(f"rank {r} bytes", read == want[r].received and was_read == want[r].sent,
                         f"read {read} from peers (formula {want[r].received}), peers read {was_read} "
                         f"of its buffers (formula {want[r].sent})"))
    sent = sum(v["sent"] for v in got.values())
    out.append(Check("no sends", sent == 0, f"{sent} B sent through the transport (direct reads send nothing)"))
    order = []
    for e in run.tracer.data_events():
        if e["phase"] not in order:
            order.append(e["phase"])
    phases = sorted(order, key=lambda p: list(PHASES).index(p) if p in PHASES else -1)
    out.append(Check("phases", phases == expected_phases(run), f"{', '.join(phases) or 'none'}"))
    if run.private == "stage" and run.world > 1 and run.nbytes:
        out.append(Check("staged", all(run.staged), "every rank's call read inputs staged in the stage window"))
    if run.private == "read" and run.world > 1 and run.nbytes:  # (nothing to read: nothing offered)
        offered = [r for r in range(run.world) if run.offered[r]]
        want = [run.root] if run.op == "broadcast" else list(range(run.world))
        out.append(Check("read in place", offered == want and not any(run.staged),
                         f"ranks {offered} offered their input to process_vm_readv, none staged"))
    ok = all(np.array_equal(o, e) for o, e in zip(run.outputs, reference(run)))
    out.append(Check("result", ok, "every rank's output equals numpy's"))
    return out
