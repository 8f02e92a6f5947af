"""collectives/gpu_ring/backend.py's CupyBackend over a fake cupy that records every call.

No GPU here, so what the real backend hands the driver is checked instead: NVRTC gets
the inlined source and IEEE options for the device's own architecture; the workspace
is one cudaMalloc (an IPC handle needs a base allocation) and pinned memory with the
portable and mapped flags; a launch passes one kernel parameter, the packed
layout.Args, through cuLaunchKernel (or cuLaunchCooperativeKernel) with 512 threads a
block; virtual ranks fill each rank's neighbours and peer table with the others'
workspaces. Whether the driver then runs it is for the GPU run to show.
"""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from collectives.gpu_ring import backend as B
from collectives.gpu_ring import layout
from collectives.gpu_ring.ring import Ring


class FakeCupy:
    """What CupyBackend calls, with host memory behind every 'device' allocation."""

    def __init__(self, cooperative=1):
        self.calls, self.keep, self.streams = [], [], 0
        me = self

        def alloc(n, *flags):
            buf = ctypes.create_string_buffer(n + 256)
            me.keep.append(buf)
            ptr = ctypes.addressof(buf) + (-ctypes.addressof(buf)) % 256
            me.calls.append(("alloc", n, flags))
            return ptr

        class Device:
            compute_capability = "90"

            def __init__(self, dev=0):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

        class Stream:
            null = SimpleNamespace(ptr=0, synchronize=lambda: None)

            def __init__(self, non_blocking=False):
                me.streams += 1
                me.calls.append(("stream", non_blocking))
                self.ptr, self.non_blocking = 0x5000 + me.streams, non_blocking

            def synchronize(self):
                me.calls.append(("sync", self.ptr))

        class NVRTCError(Exception):
            pass

        def compile_(prog, opts):
            me.calls.append(("nvrtc", prog, tuple(opts)))

        class Module:
            def load(self, image):
                me.calls.append(("load", image))

            def get_function(self, name):
                return SimpleNamespace(ptr=hash(name) & 0xFFFF, name=name)

        def launch(*a):
            fn, gx, gy, gz, bx, by, bz, smem, stream, params = a[:10]
            arg = ctypes.c_void_p.from_address(params).value
            me.calls.append(("launch" if len(a) == 11 else "coop", fn, gx, bx, stream,
                             layout.Args.from_buffer_copy(ctypes.string_at(arg, ctypes.sizeof(layout.Args)))))

        rt = SimpleNamespace(
            getDeviceProperties=lambda d: {"multiProcessorCount": 132}, deviceGetAttribute=lambda a, d: cooperative,
            malloc=alloc, free=lambda p: None, hostAlloc=alloc, freeHost=lambda p: None,
            memset=lambda p, v, n: ctypes.memset(p, v, n), ipcGetMemHandle=lambda p: p.to_bytes(64, "little"),
            ipcOpenMemHandle=lambda h: int.from_bytes(h, "little") + 1)
        self.cuda = SimpleNamespace(
            Device=Device, Stream=Stream, runtime=rt,
            nvrtc=SimpleNamespace(NVRTCError=NVRTCError, createProgram=lambda src, name, h, n: (me.calls.append(
                ("source", name, src)), 7)[1], compileProgram=compile_, getCUBIN=lambda p: b"cubin",
                destroyProgram=lambda p: None, getProgramLog=lambda p: ""),
            function=SimpleNamespace(Module=Module),
            driver=SimpleNamespace(launchKernel=launch, launchCooperativeKernel=launch,
                                   occupancyMaxActiveBlocksPerMultiprocessor=lambda f, b, s: 1))


def test_compile_allocate_and_launch_go_to_the_driver_as_packed():
    cp = FakeCupy()
    be = B.CupyBackend(cp)
    assert be.sm_count == 132 and be.cooperative and be.block == 512
    geo = layout.Geometry(channels=4, slots=4, slot_bytes=4096, stage_bytes=1 << 16)
    ring = Ring.virtual(be, 3, geo, timeout_s=2.0)
    (src,) = [c for c in cp.calls if c[0] == "source"]
    assert src[1] == "ring.cu" and "ring_body<T, OP, COLL>" in src[2] and '#include "' not in src[2]
    (opts,) = [c[2] for c in cp.calls if c[0] == "nvrtc"]
    assert "--gpu-architecture=sm_90" in opts and "-ftz=false" in opts and "--std=c++17" in opts
    allocs = [c for c in cp.calls if c[0] == "alloc"]
    assert [a[1] for a in allocs].count(geo.nbytes) == 3 and allocs[1][2] == (3,)  # portable | mapped
    xs, outs = [0x1000, 0x2000, 0x3000], [0x1100, 0x2100, 0x3100]
    ring.run("all_reduce", xs, outs, [1 << 20, 1 << 20, 1 << 20], np.float32, "sum", kernel="ring", channels=2)
    (kind, fn, grid, block, stream, args), = [c for c in cp.calls if c[0] in ("launch", "coop")]
    assert kind == "coop" and grid == 3 * 2 and block == 512 and stream != 0
    assert list(args.L.offs[:4]) == [0, 1 << 20, 2 << 20, 3 << 20] and args.L.nlocal == 3 and args.L.nchannels == 2
    assert (args.L.slot_bytes, args.L.slot_stride, args.L.nslots) == (4096, geo.slot_stride, 4)
    assert args.L.timeout_ns == 2_000_000_000 and args.L.nranks == 3
    ws = ring.ws_ptrs
    for r in range(3):
        a = args.r[r]
        assert (a.rank, a.x, a.out, a.ws, a.left, a.right) == (r, xs[r], outs[r], ws[r], ws[r - 1], ws[(r + 1) % 3])
        assert list(a.peer[:3]) == ws and a.flags == 0 and a.err == ring.own[r].err_ptr
    assert ("sync", stream) in cp.calls


def test_without_cooperative_launches_each_rank_on_its_own_stream():
    cp = FakeCupy(cooperative=0)
    be = B.CupyBackend(cp)
    ring = Ring.virtual(be, 4, layout.Geometry(channels=2, slots=2, slot_bytes=1024, stage_bytes=1 << 14))
    assert ring.residency.mode == "streams"
    ring.run("all_gather", [1, 2, 3, 4], [5, 6, 7, 8], [100] * 4, np.float32, right_outs=[6, 7, 8, 5],
             kernel="ring", channels=2)
    launches = [c for c in cp.calls if c[0] == "launch"]
    assert len(launches) == 4 and len({c[4] for c in launches}) == 4  # one stream each
    for r, (_, _, grid, _, _, args) in enumerate(launches):
        assert grid == 2 and args.L.nlocal == 1 and args.r[0].rank == r and args.r[0].flags == layout.DIRECT
        assert args.r[0].right_out == [6, 7, 8, 5][r] and list(args.L.offs[:5]) == [0, 400, 800, 1200, 1600]
    assert [c[1] for c in cp.calls if c[0] == "stream"] == [True] * 4  # non-blocking: never waits for stream 0


def test_connect_maps_every_peer_once_through_ipc():
    cp = FakeCupy()
    be = B.CupyBackend(cp)
    geo = layout.Geometry(channels=1, slots=2, slot_bytes=1024, stage_bytes=1 << 12)
    sent = []

    def allgather(data):
        sent.append(data)
        if len(sent) == 2:  # the verdicts: everyone accepts
            return [data] * 3
        return [data if r == 1 else (0x9000 + r).to_bytes(64, "little") for r in range(3)]
    ring = Ring.connect(be, 1, 3, allgather, geo)
    assert len(sent) == 2 and ring.ws_ptrs == [0x9001, ring.own[1].ptr, 0x9003] and sent[1] == b"\x01"
    assert ring.residency.mode == "one-per-gpu"
    sent.clear()
    vetoed = Ring.connect(be, 1, 3, lambda d: (sent.append(d), [d, d, b"\x00"] if len(sent) == 2 else [d] * 3)[1], geo)
    assert not vetoed.residency.ok and "rank(s) [2] refused" in vetoed.residency.reason
    with pytest.raises(ValueError, match="direct mode"):
        ring.launch("all_reduce", [0], [0], [8, 8, 8], np.float32, "sum", right_outs=[0])
