"""The host side of the GPU kernel ring: set up once, then one launch per collective call.

    ring = Ring.virtual(backend, world=4)                    # 4 virtual ranks on one GPU
    ring.run("all_reduce", xs, outs, counts, np.float32, "sum")  # pointers, one per rank
    ring = Ring.connect(backend, rank, world, allgather)     # one rank per process (CUDA IPC)

A call picks its kernel (road.kernel_kind: one-shot, two-shot or the ring) and its
channels (road.channels, capped by residency.py), fills one layout.Args per launch and
launches it: virtual ranks cooperatively in one launch, or one launch per rank on its
own stream; a process its one rank on the caller's stream. :meth:`Ring.wait`
synchronizes, reads the error records, resets the workspaces after a failure and raises
CollectiveTimeout naming the rank, the peer and the step. Buffers are device pointers
(ints); ``counts`` are the segments in elements, the same on every rank.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..dtypes import dtype_name
from ..errors import CollectiveError, CollectiveTimeout
from . import layout, plan, record, residency, road, source, tuning
from .workspace import Workspace, map_peers


def default_geometry() -> layout.Geometry:
    """The workspace tuning.py describes (unmeasured defaults)."""
    return layout.Geometry(channels=tuning.MAX_CHANNELS, slots=tuning.SLOTS, slot_bytes=tuning.SLOT_BYTES,
                           stage_bytes=tuning.STAGE_BYTES)


class Ring:
    """The ranks this process drives (all of them, or one), their workspaces and the peers'.

    Use :meth:`virtual` or :meth:`connect`; the constructor takes what they computed.
    """

    def __init__(self, backend, world: int, ranks: Sequence[int], own: dict, ws_ptrs: list[int],
                 geometry: layout.Geometry, timeout_s: float, res: residency.Residency,
                 barrier: Callable[[], None] | None = None):
        if not 2 <= world <= layout.MAX_RANKS:
            raise ValueError(f"the kernel ring serves 2..{layout.MAX_RANKS} ranks, not {world}")
        self.backend, self.world, self.ranks, self.own = backend, world, list(ranks), own
        self.ws_ptrs, self.geometry, self.residency = list(ws_ptrs), geometry, res
        self.timeout_ns = int(timeout_s * 1e9)
        self._barrier = barrier
        self._own_streams: list | None = None  # made once: a rank's calls must stay in order on its stream
        self.broken: CollectiveError | None = None
        self.last: dict = {}  # the last launch's kernel, channels, grid and mode (for tests and explain)

    @classmethod
    def virtual(cls, backend, world: int, geometry: layout.Geometry | None = None,
                timeout_s: float = tuning.TIMEOUT_S) -> "Ring":
        """``world`` virtual ranks in this process on one device, peers as plain pointers."""
        g = geometry or default_geometry()
        own = {r: Workspace(backend, g) for r in range(world)}
        fn = backend.function(source.ring_kernel("all_reduce", "sum", np.float32))
        res = residency.virtual_ranks(world, g.channels, backend.sm_count, backend.cooperative,
                                      backend.blocks_per_sm(fn, backend.block) * backend.sm_count)
        if not res.ok:
            raise CollectiveError(f"gpu ring: {res.reason}")
        return cls(backend, world, range(world), own, [own[r].ptr for r in range(world)], g, timeout_s, res)

    @classmethod
    def connect(cls, backend, rank: int, world: int, allgather: Callable[[bytes], list[bytes]],
                geometry: layout.Geometry | None = None, timeout_s: float = tuning.TIMEOUT_S,
                gpu_partner: int | None = None, mps: bool | None = None) -> "Ring":
        """One rank per process: map every peer's workspace once through CUDA IPC.

        Args:
          backend: this process's device.
          rank, world: this rank and the ranks.
          allgather: the bootstrap's allgather of bytes (setup only, never per call).
          geometry: the workspace sizes (the same on every rank).
          timeout_s: the deadline of every wait on the device.
          gpu_partner: the other rank whose process shares this GPU, if one does.
          mps: whether MPS serves this process (default: residency.mps_active()).

        Every rank learns every rank's verdict (one more allgather): the road is used by
        all or by none.
        """
        g = geometry or default_geometry()
        ws = Workspace(backend, g)
        ptrs = map_peers(backend, ws, rank, allgather)
        ring = cls(backend, world, [rank], {rank: ws}, ptrs, g, timeout_s,
                   residency.Residency(True, "one-per-gpu", g.channels, "pending"), lambda: allgather(b""))
        on_gpu = 1 if gpu_partner is None else 2
        use_mps = residency.mps_active() if mps is None else mps
        probe = (lambda: ring.probe(gpu_partner)) if gpu_partner is not None and use_mps else None
        res = residency.processes(on_gpu, g.channels, use_mps, probe)
        verdicts = allgather(b"\x01" if res.ok else b"\x00")  # every rank accepts, or none uses the road
        refused = [r for r, v in enumerate(verdicts) if v != b"\x01"]
        if refused and res.ok:
            res = residency.Residency(False, "refused", 0, f"rank(s) {refused} refused the kernel ring")
        ring.residency = res
        if not res.ok:
            ws.reset()
        return ring

    # ----------------------------------------------------------------- calls
    def plan(self, collective: str, nbytes: int, kernel: str | None = None, channels: int | None = None) -> dict:
        """The kernel, channels per rank, grid and launch mode a call of ``nbytes`` gets."""
        kind = kernel or road.kernel_kind(collective, nbytes, self.geometry.stage_bytes)
        if kind != "ring" and nbytes > self.geometry.stage_bytes:
            raise ValueError(f"{kind}: {nbytes} bytes do not fit the {self.geometry.stage_bytes}-byte staging area")
        cap = self.residency.channels if kind == "ring" else layout.MAX_CHANNELS
        nlocal = len(self.ranks)
        if channels is None:
            pick = road.channels if kind == "ring" else road.small_blocks
            channels = pick(nbytes, cap, nlocal, self.backend.sm_count)
        if not 1 <= channels <= cap:
            raise ValueError(f"channels must be 1..{cap} for the {kind} kernel, got {channels}")
        mode = self.residency.mode
        if mode == "streams" and nlocal * channels > self.backend.sm_count:
            raise ValueError(f"{nlocal} ranks x {channels} channels exceed {self.backend.sm_count} SMs")
        return {"kernel": kind, "channels": channels, "mode": mode}

    def launch(self, collective: str, xs: Sequence[int], outs: Sequence[int], counts: Sequence[int], dtype,
               op: str | None = None, *, streams=None, kernel: str | None = None, channels: int | None = None,
               right_outs: Sequence[int] | None = None) -> list:
        """Launch one call for every rank of this process; returns the streams to :meth:`wait` on.

        Args:
          collective: reduce_scatter, all_gather or all_reduce.
          xs, outs: device addresses of each local rank's input and output, in self.ranks order.
          counts: elements of every segment (world entries, the same on every rank).
          dtype: the element type.
          op: sum, prod, max or min (not for all_gather).
          streams: one per local rank, or one for all (default: the ring's own non-blocking
            streams, made once, so that each rank's calls run in order).
          kernel: "ring", "oneshot" or "twoshot" instead of road.kernel_kind's choice.
          channels: ring channels (small kernels: blocks) per rank instead of road's choice.
          right_outs: direct mode (ring kernel): each local rank's right neighbour's output,
            mapped here; the all-gather data goes there without slots.
        """
        if self.broken is not None:
            raise CollectiveError(f"gpu ring: unusable after an earlier failure ({self.broken}); call recover()")
        counts = [int(c) for c in counts]
        if len(counts) != self.world or min(counts) < 0:
            raise ValueError(f"counts must be {self.world} non-negative integers, got {counts}")
        itemsize = np.dtype(dtype).itemsize
        dtype_name(dtype)
        p = self.plan(collective, sum(counts) * itemsize, kernel, channels)
        if right_outs is not None and p["kernel"] != "ring":
            raise ValueError("direct mode (right_outs) is a mode of the ring kernel")
        name = (source.ring_kernel(collective, op, dtype) if p["kernel"] == "ring"
                else source.small_kernel(p["kernel"], collective, op, dtype))
        fn = self.backend.function(name)
        streams = self._streams(streams)
        per_launch = [list(range(len(self.ranks)))] if p["mode"] != "streams" else [[i] for i in range(len(self.ranks))]
        scale = itemsize if collective == "all_gather" else 1
        offs = [o * scale for o in plan.offsets(counts)]
        for k, idx in enumerate(per_launch):
            args = self._args(offs, p["channels"], idx, xs, outs, right_outs)
            self.backend.launch(fn, len(idx) * p["channels"], self.backend.block, args, streams[k % len(streams)],
                                cooperative=p["mode"] == "cooperative")
        self.last = {**p, "name": name, "grid": len(per_launch[0]) * p["channels"], "launches": len(per_launch)}
        return streams

    def run(self, *args, **kw) -> None:
        """:meth:`launch`, then :meth:`wait`."""
        self.wait(self.launch(*args, **kw))

    def wait(self, streams) -> None:
        """Synchronize, then raise CollectiveTimeout if a kernel of a local rank gave up
        (the lowest rank that timed out first names the failure; every record is attached)."""
        for s in streams:
            self.backend.synchronize(s)
        errors = [e for r in self.ranks if (e := record.decode(self.own[r].err, self.world)) is not None]
        if not errors:
            return
        for r in self.ranks:
            self.own[r].reset()
        lead = min(errors, key=lambda e: (e.cause != "timeout", e.rank))
        first = lead
        if len(errors) > 1:  # the one that timed out first, then every other rank's record
            first = CollectiveTimeout("; ".join([str(lead)] + [str(e) for e in errors if e is not lead]))
            for k in ("rank", "peer", "step", "channel", "cause", "blamed", "origin"):
                setattr(first, k, getattr(lead, k))
        first.records = errors
        if self._barrier is not None:  # peers' kernels may still touch our workspace: recover() before reuse
            self.broken = first
        raise first

    def recover(self) -> None:
        """After a failure across processes: every rank meets, resets, and meets again."""
        if self._barrier is not None:
            self._barrier()
        for r in self.ranks:
            self.own[r].reset()
        if self._barrier is not None:
            self._barrier()
        self.broken = None

    # ------------------------------------------------------------ internals
    def _streams(self, streams) -> list:
        if streams is None:
            if self._own_streams is None:
                n = len(self.ranks) if self.residency.mode == "streams" else 1
                self._own_streams = [self.backend.stream() for _ in range(n)]
            return self._own_streams
        return list(streams) if isinstance(streams, (list, tuple)) else [streams]

    def _args(self, offs: list[int], nch: int, idx: list[int], xs, outs, right_outs) -> layout.Args:
        g, n = self.geometry, self.world
        a = layout.Args()
        L = a.L
        for s in range(layout.MAX_RANKS + 1):
            L.offs[s] = offs[min(s, n)]
        L.slot_bytes, L.slot_stride, L.slots_off = g.slot_bytes, g.slot_stride, g.slots_off
        L.stage_bytes, L.stage_off, L.timeout_ns = g.stage_bytes, g.stage_off, self.timeout_ns
        L.nranks, L.nslots, L.nchannels, L.nlocal = n, g.slots, nch, len(idx)
        for j, i in enumerate(idx):
            r = self.ranks[i]
            ws = self.own[r]
            a.r[j] = layout.Rank(ws=self.ws_ptrs[r], left=self.ws_ptrs[(r - 1) % n], right=self.ws_ptrs[(r + 1) % n],
                                 x=int(xs[i]), out=int(outs[i]), right_out=int(right_outs[i]) if right_outs else 0,
                                 err=ws.err_ptr, host_abort=ws.abort_ptr, rank=r,
                                 flags=layout.DIRECT if right_outs else 0)
            for p in range(n):
                a.r[j].peer[p] = self.ws_ptrs[p]
        return a

    def probe(self, partner: int) -> residency.ProbeResult:
        """The two-process handshake with ``partner`` (both processes call it at once)."""
        (r,) = self.ranks
        ws = self.own[r]
        for i in range(3):
            ws.probe_result[i] = 0
        args = layout.Probe(ws=ws.ptr, peer=self.ws_ptrs[partner], result=ws.probe_ptr,
                            deadline_ns=int(tuning.PROBE_DEADLINE_S * 1e9), rounds=tuning.PROBE_ROUNDS)
        s = self.backend.stream()
        self.backend.launch(self.backend.function("rz_probe"), 1, 32, args, s)
        self.backend.synchronize(s)
        return residency.ProbeResult(int(ws.probe_result[0]), int(ws.probe_result[1]), int(ws.probe_result[2]))
