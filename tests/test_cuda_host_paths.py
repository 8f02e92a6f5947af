"""CudaKernels' host-side logic, driven through a fake cupy (no GPU needed).

What a first run on a GPU would have tripped over, checked here:
- copy() with a numpy 2 array on one side (numpy 2 arrays have .device too);
- the kernels are compiled with NVRTC without -ftz=true (cupy.RawModule
  appends it), for the device's own sm_XY, and loaded as a cubin;
- grids are one wave of the kernel's occupancy as the driver reports it,
  not a fixed 8 blocks per SM.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from collectives.kernels import NUMPY_KERNELS, launch
from collectives.kernels.cuda_kernels import CudaKernels
from sharding import optim, optim_numpy
from sharding.optim_cuda import CudaOptimSteps, cuda_steps


class FakeDeviceArray:
    """A host array dressed as a cupy array: .data.ptr, .device.id, a type from a "cupy" module."""

    __module__ = "cupy_fake"

    def __init__(self, a: np.ndarray):
        self.a = a
        self.data = SimpleNamespace(ptr=a.ctypes.data)
        self.device = SimpleNamespace(id=0)
        self.dtype, self.size, self.nbytes, self.flags = a.dtype, a.size, a.nbytes, a.flags

    def reshape(self, *shape):
        return self


class FakeCupy:
    def __init__(self, occupancy: int = 5, archs=(75, 80, 86, 89, 90)):
        self.calls = []
        me = self

        class Device:
            compute_capability = "90"

            def __init__(self, dev=0):
                self.id = dev

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class NVRTCError(RuntimeError):
            pass

        class Function:
            def __init__(self, name):
                self.name, self.ptr = name, 1234

            def __call__(self, grid, block, args, shared_mem=0, stream=None):
                me.calls.append(("launch", self.name, grid, block, args))

        class Module:
            def load(self, image):
                me.calls.append(("load", image))

            def get_function(self, name):
                return Function(name)

        nvrtc = SimpleNamespace(
            NVRTCError=NVRTCError, getSupportedArchs=lambda: archs, getVersion=lambda: (13, 0),
            createProgram=lambda src, name, h, i: me.calls.append(("create", name)) or 7,
            compileProgram=lambda prog, opts: me.calls.append(("compile", tuple(opts))),
            getCUBIN=lambda prog: b"CUBIN", getPTX=lambda prog: b"PTX",
            destroyProgram=lambda prog: None, getProgramLog=lambda prog: "")
        driver = SimpleNamespace(
            occupancyMaxActiveBlocksPerMultiprocessor=lambda f, block, smem: occupancy,
            funcGetAttribute=lambda attr, f: 40)
        runtime = SimpleNamespace(
            getDeviceProperties=lambda dev: {"multiProcessorCount": 132},
            memcpyAsync=lambda dst, src, n, kind, stream: me.calls.append(("memcpy", dst, src, n)))
        self.cuda = SimpleNamespace(Device=Device, nvrtc=nvrtc, driver=driver, runtime=runtime,
                                    function=SimpleNamespace(Module=Module),
                                    Stream=SimpleNamespace(null=SimpleNamespace(ptr=0)))


def test_copy_between_numpy2_host_array_and_device_array():
    """numpy >= 2 arrays have a .device attribute; copy() must not take them for cupy arrays."""
    cp = FakeCupy()
    k = CudaKernels(cp)
    host = np.arange(10, dtype=np.float32)
    dev = FakeDeviceArray(np.zeros(10, np.float32))
    k.copy(host, dev)  # down
    k.copy(dev, host)  # up
    assert cp.calls == [("memcpy", host.ctypes.data, dev.data.ptr, 40),
                        ("memcpy", dev.data.ptr, host.ctypes.data, 40)]
    with pytest.raises(ValueError, match="both arrays are host memory"):
        k.copy(host, host.copy())


def test_kernels_compile_without_flush_to_zero_for_the_device_arch():
    cp = FakeCupy()
    k = CudaKernels(cp)
    a, b, out = (FakeDeviceArray(np.ones(1000, np.float32)) for _ in range(3))
    k.reduce("sum", a, b, out)
    compiles = [c[1] for c in cp.calls if c[0] == "compile"]
    assert len(compiles) == 1
    opts = compiles[0]
    assert "-ftz=false" in opts and "-ftz=true" not in opts
    assert "--gpu-architecture=sm_90" in opts and "-prec-div=true" in opts and "-prec-sqrt=true" in opts
    assert ("load", b"CUBIN") in cp.calls
    assert k.compiled_with[(0, "reduce.cu")] == opts
    # optim.cu keeps its own options (no multiply-add contraction) on top
    cuda_steps(k).adamw_step(a, b, out, FakeDeviceArray(np.ones(1000, np.float32)), lr=1e-3, beta1=0.9,
                             beta2=0.999, eps=1e-8, weight_decay=0.0, step=1)
    opts = [c[1] for c in cp.calls if c[0] == "compile"][1]
    assert "--fmad=false" in opts and "-ftz=false" in opts


def test_sharding_picks_the_optimizer_steps_by_the_array_kind(monkeypatch):
    k = CudaKernels(FakeCupy())
    monkeypatch.setattr(optim, "kernels_for", lambda x: k)  # kernels_for(device array) needs cupy
    assert optim.steps_for(np.zeros(3, np.float32)) is optim_numpy
    steps = optim.steps_for(FakeDeviceArray(np.zeros(3, np.float32)))
    assert isinstance(steps, CudaOptimSteps) and steps.kernels is k
    assert optim.steps_for(FakeDeviceArray(np.zeros(3, np.float32))) is steps  # one per kernel set
    # collectives' kernel sets compute reduce/copy/scale only; the optimizer math is sharding's
    assert not any(hasattr(ks, f) for ks in (k, NUMPY_KERNELS) for f in ("adamw_step", "sgd_step", "cast"))


def test_device_newer_than_nvrtc_gets_ptx_for_the_newest_arch_nvrtc_knows():
    cp = FakeCupy(archs=(75, 80, 86))
    k = CudaKernels(cp)
    a = FakeDeviceArray(np.ones(100, np.float32))
    k.scale(a, 2)
    opts = [c[1] for c in cp.calls if c[0] == "compile"][0]
    assert "--gpu-architecture=compute_86" in opts
    assert ("load", b"PTX") in cp.calls


@pytest.mark.parametrize("occ", [5, 6, 8])
def test_grid_is_one_wave_of_the_kernels_occupancy(occ):
    cp = FakeCupy(occupancy=occ)
    k = CudaKernels(cp)
    n = 1 << 22  # far more vectors than one wave of threads
    a, b, out = (FakeDeviceArray(np.ones(n, np.float32)) for _ in range(3))
    k.reduce("sum", a, b, out)
    launches = [c for c in cp.calls if c[0] == "launch"]
    assert launches[0][2] == (132 * occ,) and launches[0][3] == (launch.BLOCK,)
    assert k.blocks_per_sm(0, "rz_reduce_sum_f32") == occ


def test_occupancy_calculator():
    """The register arithmetic of sm_80/sm_90 (64 Ki registers, 256-register units per warp)."""
    assert launch.occupancy(32) == 8      # 2048 threads is the cap
    assert launch.occupancy(40) == 6      # 1280 regs a warp, 10240 a block
    assert launch.occupancy(44) == 5      # 1408 -> 1536 a warp, 12288 a block
    assert launch.occupancy(64) == 4
    assert launch.occupancy(255) == 1
    assert launch.occupancy(32, block=64) == 32
    assert launch.occupancy(32, shared_bytes=100 * 1024) == 2
    with pytest.raises(ValueError):
        launch.occupancy(0)


def test_gpu_wheels_match_one_cuda_major_and_bring_nvrtc():
    """cupy-cuda12x on a CUDA-13-only machine finds no libnvrtc.so.12: each extra pairs a
    cupy and an NCCL wheel of one CUDA major, with [ctk] (NVRTC as a wheel); the default
    `gpu` extra and requirements-gpu.txt are CUDA 13, the lent machines' major."""
    import ast
    import re
    root = launch.CSRC.parent
    tree = ast.parse((root / "setup.py").read_text())
    gpu = next(ast.literal_eval(n.value) for n in ast.walk(tree)
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "GPU")
    assert set(gpu) == {"12", "13"}
    for major, reqs in gpu.items():
        cupy = [r for r in reqs if r.startswith("cupy")]
        nccl = [r for r in reqs if r.startswith("nvidia-nccl")]
        assert len(cupy) == 1 and cupy[0].startswith(f"cupy-cuda{major}x[ctk]"), reqs
        assert len(nccl) == 1 and nccl[0].startswith(f"nvidia-nccl-cu{major}"), reqs
    lines = [ln.strip() for ln in (root / "requirements-gpu.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines == gpu["13"]
    assert re.search(r'"gpu": GPU\["13"\]', (root / "setup.py").read_text())


def test_staged_copies_use_one_stream_per_direction():
    """Uploads must not queue behind downloads: CupyBackend's d2h and h2d go on two streams."""
    from collectives.transport.device import CupyBackend

    memcpys, counter = [], iter(range(100, 200))

    class Stream:
        def __init__(self, non_blocking=False):
            self.ptr = next(counter)

        def wait_event(self, ev):
            pass

    class Event:
        def __init__(self, disable_timing=False):
            self.done = True

        def record(self, stream=None):
            pass

    cp = FakeCupy()
    cp.cuda.Stream, cp.cuda.Event = Stream, Event
    Stream.null = SimpleNamespace(ptr=0)
    cp.cuda.runtime.memcpyAsync = lambda dst, src, n, kind, stream: memcpys.append((kind, stream))
    b = CupyBackend.__new__(CupyBackend)
    b.cp, b._copy_streams, b._opened, b._libcuda = cp, {}, {}, None
    dev = FakeDeviceArray(np.zeros(64, np.uint8))
    host = np.zeros(64, np.uint8)
    ready = b.record(dev)
    for _ in range(2):
        b.d2h(host, dev, ready)
        b.h2d(dev, host, ready)
    down = {s for kind, s in memcpys if kind == 2}
    up = {s for kind, s in memcpys if kind == 1}
    assert len(down) == 1 and len(up) == 1 and down != up, memcpys
    assert sorted(d for _, d, _ in b.streams_used()) == ["d2h", "h2d"]


class _IpcFake:
    """cupy's IPC calls, recorded; allocations are (start, size, buffer id) ranges."""

    def __init__(self):
        self.calls, self.allocs, self.next_base = [], [], 0x7000_0000
        cp = FakeCupy()
        me = self

        class Event:
            def __init__(self, disable_timing=False):
                self.synced = False

            def record(self, stream=None):
                pass

            def synchronize(self):
                self.synced = True
                me.calls.append(("sync", self))

        cp.cuda.Event = Event
        cp.cuda.runtime.ipcGetMemHandle = lambda ptr: me.calls.append(("get", ptr)) or ptr.to_bytes(8, "little") * 8
        cp.cuda.runtime.ipcOpenMemHandle = lambda h, flags: me.calls.append(("open", h)) or me._new_base()
        cp.cuda.runtime.ipcCloseMemHandle = lambda base: me.calls.append(("close", base))
        cp.cuda.runtime.memcpyAsync = lambda dst, src, n, kind, stream: me.calls.append(("copy", src, n))
        self.cp = cp

    def _new_base(self):
        self.next_base += 1 << 20
        return self.next_base

    def backend(self):
        from collectives.transport.device import CupyBackend
        b = CupyBackend.__new__(CupyBackend)
        b.cp, b._copy_streams, b._libcuda = self.cp, {}, None
        from collections import OrderedDict
        b._opened, b._owners, b._exports = OrderedDict(), {}, OrderedDict()
        b.stats = {"exports": 0, "handles_made": 0, "pulls": 0, "mappings_opened": 0, "mappings_closed": 0}
        b._range = lambda ptr: next((s, n, i) for s, n, i in self.allocs if s <= ptr < s + n)
        return b

    def count(self, kind):
        return sum(1 for c in self.calls if c[0] == kind)


def _slice(ptr):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr), device=SimpleNamespace(id=0))


def test_ipc_exports_are_cached_per_allocation():
    f = _IpcFake()
    b = f.backend()
    f.allocs = [(0x1000, 4096, 1)]
    got = [b.export(_slice(0x1000 + 256 * i)) for i in range(10)]
    assert f.count("get") == 1, "one ipcGetMemHandle per allocation, not per message"
    assert [o for _, o, _ in got] == [256 * i for i in range(10)] and {s for _, _, s in got} == {0x1000}
    f.allocs = [(0x1000, 4096, 2)]  # freed and allocated again at the same address: a new buffer id
    b.export(_slice(0x1100))
    assert f.count("get") == 2


def test_ipc_mappings_are_bounded_and_closed_after_their_last_copy():
    from collectives.transport.device import backend as be
    f = _IpcFake()
    b = f.backend()
    dst = FakeDeviceArray(np.zeros(16, np.uint8))
    for i in range(be.MAX_CACHED + 5):
        b.pull(dst, i.to_bytes(8, "little") * 8, 0, 16, owner=(1, 0x1000 * (i + 1)))
    assert b.mappings() == be.MAX_CACHED and f.count("open") == be.MAX_CACHED + 5 and f.count("close") == 5
    order = [c[0] for c in f.calls if c[0] in ("sync", "close")]
    assert order == ["sync", "close"] * 5, "a mapping is closed only after the copy from it finished"
    b.close()
    assert b.mappings() == 0 and f.count("close") == be.MAX_CACHED + 5


def test_ipc_mapping_released_when_the_peer_reallocates_the_address():
    f = _IpcFake()
    b = f.backend()
    dst = FakeDeviceArray(np.zeros(16, np.uint8))
    old, new = b"a" * 64, b"b" * 64
    b.pull(dst, old, 0, 16, owner=(1, 0x5000))
    b.pull(dst, old, 8, 8, owner=(1, 0x5000))  # cached: no second open
    assert f.count("open") == 1 and f.count("close") == 0
    b.pull(dst, new, 0, 16, owner=(1, 0x5000))  # same peer and start, new handle: the old one was freed
    assert f.count("open") == 2 and f.count("close") == 1 and b.mappings() == 1
    b.pull(dst, old.replace(b"a", b"c"), 0, 16, owner=(2, 0x5000))  # another peer's allocation: kept apart
    assert b.mappings() == 2


def test_ipc_cache_counters():
    """gpu_collectives.py reports these on the GPU: handles made << messages exported."""
    f = _IpcFake()
    b = f.backend()
    b.stats = {"exports": 0, "handles_made": 0, "pulls": 0, "mappings_opened": 0, "mappings_closed": 0}
    f.allocs = [(0x1000, 4096, 1)]
    for i in range(5):
        b.export(_slice(0x1000 + 64 * i))
    dst = FakeDeviceArray(np.zeros(16, np.uint8))
    for _ in range(3):
        b.pull(dst, b"h" * 64, 0, 16, owner=(1, 0x1000))
    b.close()
    assert b.stats == {"exports": 5, "handles_made": 1, "pulls": 3, "mappings_opened": 1, "mappings_closed": 1}


def test_ipc_signals_one_interprocess_event_recorded_per_message_and_peer_events_opened_once():
    """CupyBackend.signal / wait_signal (the IPC path's stream waits) against cupy's calls:
    one interprocess event per device, its handle made once and recorded per message on the
    default stream; a peer's handle opened once, a stream wait queued per message, destroyed
    on close."""
    f = _IpcFake()
    b = f.backend()
    made = []

    class Event:
        def __init__(self, block=False, disable_timing=False, interprocess=False):
            assert disable_timing and interprocess, "an IPC event must be interprocess without timing"
            self.ptr = 0xE000 + len(made)
            made.append(self)

        def record(self, stream=None):
            f.calls.append(("record", self.ptr, stream))

    rt = f.cp.cuda.runtime
    f.cp.cuda.Event = Event
    rt.ipcGetEventHandle = lambda ptr: f.calls.append(("get_event", ptr)) or b"E" * 64
    rt.ipcOpenEventHandle = lambda h: f.calls.append(("open_event", h)) or 0xF000
    rt.streamWaitEvent = lambda stream, ev, flags: f.calls.append(("wait", stream, ev, flags))
    rt.eventDestroy = lambda ev: f.calls.append(("destroy", ev))
    b._signals, b._peer_signals = {}, {}
    b.stats.update(signals=0, signal_waits=0)
    buf = _slice(0x1000)
    assert [b.signal(buf) for _ in range(3)] == [b"E" * 64] * 3
    assert len(made) == 1 and f.count("get_event") == 1 and f.count("record") == 3
    for _ in range(4):
        b.wait_signal(buf, b"P" * 64)
    assert f.count("open_event") == 1 and f.count("wait") == 4
    assert {c[2] for c in f.calls if c[0] == "wait"} == {0xF000}
    b.close()
    assert f.count("destroy") == 1 and b.stats["signals"] == 3 and b.stats["signal_waits"] == 4
