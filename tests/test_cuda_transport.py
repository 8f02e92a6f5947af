"""The device transport's protocols (staged, CUDA-aware, IPC) without a GPU.

transport/device.py keeps every GPU call behind a small backend. Here a fake
backend stands in: numpy arrays play device buffers, events complete only
after a few polls (so every state of every protocol is visited), and "IPC
handles" name arrays in a registry shared by the simulated ranks. The real
ring collectives then run over it on threads (in-process transport) and
must give the exact answers. Also: everything imports, and the CPU path
works, when cupy is importable but no GPU is present.
"""
from __future__ import annotations

import sys
import threading
import types

import numpy as np
import pytest

from collectives import Communicator
from collectives.errors import CollectiveError
from collectives.transport.device import DeviceTransport, choose_mode, cuda_aware_mpi, make_device_transport
from collectives.transport.inproc import Fabric


class _LazyEvent:
    def __init__(self, polls, action=None):
        self.left, self.action = polls, action

    def done(self):
        if self.left > 0:
            self.left -= 1
            return False
        if self.action is not None:
            self.action()
            self.action = None
        return True


def _root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class FakeBackend:
    """numpy buffers as device memory; copies happen when their event completes."""

    registry: dict = {}

    def __init__(self, polls=2):
        self.polls = polls
        self.counts = {"d2h": 0, "h2d": 0, "pull": 0, "export": 0, "signal": 0, "wait_signal": 0}
        self._queued = []  # pulls not yet run: a signal (an event recorded after them) runs them
        self.records = 0

    def signal(self, buf):
        """The stream runs what is queued on it (the pulls) before the event it records."""
        self.counts["signal"] += 1
        for ev in self._queued:
            ev.left = 0
            ev.done()
        self._queued.clear()
        return b"signal".ljust(64, b"\0")

    def wait_signal(self, buf, handle):
        assert handle == b"signal".ljust(64, b"\0"), handle
        self.counts["wait_signal"] += 1

    def is_device(self, buf):
        return isinstance(buf, np.ndarray)

    def record(self, buf):
        self.records += 1  # events the protocols will host-poll
        return _LazyEvent(self.polls)

    def pinned(self, nbytes):
        return np.empty(nbytes, np.uint8)

    def d2h(self, host, buf, after):
        self.counts["d2h"] += 1
        data = buf.view(np.uint8).copy()  # the producer already ran: kernels are synchronous here
        return _LazyEvent(self.polls, lambda: host.__setitem__(slice(None), data))

    def h2d(self, buf, host, after):
        self.counts["h2d"] += 1
        return _LazyEvent(self.polls, lambda: buf.view(np.uint8).__setitem__(slice(None), host))

    def export(self, buf):
        self.counts["export"] += 1
        root = _root(buf)
        key = id(root).to_bytes(8, "little") * 8
        FakeBackend.registry[key] = root
        return key, buf.ctypes.data - root.ctypes.data, root.ctypes.data

    def pull(self, dst, handle, offset, nbytes, owner=None):
        self.counts["pull"] += 1
        src = FakeBackend.registry[handle].reshape(-1).view(np.uint8)[offset:offset + nbytes].copy()
        ev = _LazyEvent(self.polls, lambda: dst.view(np.uint8).__setitem__(slice(0, nbytes), src))
        self._queued.append(ev)
        return ev


def _run(world, mode, fn, return_errors=False, **kw):
    """fn(comm) on ``world`` threads over the device transport; (results, backends),
    or (errors, backends) with return_errors (then a rank that hangs fails the test)."""
    fabric = Fabric(world)
    backends = [FakeBackend() for _ in range(world)]
    results, errors = [None] * world, [None] * world

    def body(r):
        t = make_device_transport(fabric.transport(r), mode, backend=backends[r])
        comm = Communicator(transport=t, **{"timeout": 20, **kw})
        try:
            results[r] = fn(comm)
        except BaseException as e:
            errors[r] = e
        finally:
            comm.close()

    ths = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(60)
    assert not any(t.is_alive() for t in ths), "a rank hung"
    if return_errors:
        return errors, backends
    for e in errors:
        if e is not None:
            raise e
    return results, backends


MODES = ["staged", "ipc", "cuda_aware"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_collectives_exact_over_device_protocols(mode, world):
    n = 1000 + world

    def fn(comm):
        r = comm.rank
        x = (np.arange(n, dtype=np.float32) % 97) * (r + 1)
        ar = comm.all_reduce(x)
        avg = comm.all_reduce(np.full(n, r * 4, np.int64), op="avg")
        counts = [n // world + (i < n % world) for i in range(world)]
        rs = comm.reduce_scatter(x, counts=counts)
        ag = comm.all_gather(np.full(counts[r], r, np.int32), counts=counts)
        bc = comm.broadcast(np.full(37, r, np.float64), root=world - 1)
        return ar, avg, rs, ag, bc, counts

    results, backends = _run(world, mode, fn, chunk_bytes=256, small_bytes=64)
    base = np.arange(n, dtype=np.float32) % 97
    total = world * (world + 1) // 2
    for r, (ar, avg, rs, ag, bc, counts) in enumerate(results):
        assert np.array_equal(ar, base * total)
        assert np.array_equal(avg, np.full(n, 4 * (world - 1) * world // 2 // world, np.int64))
        off = sum(counts[:r])
        assert np.array_equal(rs, (base * total)[off:off + counts[r]])
        assert np.array_equal(ag, np.repeat(np.arange(world, dtype=np.int32), counts))
        assert np.array_equal(bc, np.full(37, world - 1, np.float64))
    if world > 1:  # the protocol actually ran
        c = backends[0].counts
        if mode == "staged":
            assert c["d2h"] > 10 and c["h2d"] > 10 and c["pull"] == 0
        elif mode == "ipc":
            assert c["pull"] > 10 and c["export"] > 10 and c["d2h"] == 0
        else:
            assert sum(c.values()) == 0


@pytest.mark.parametrize("mode", MODES)
def test_fifo_order_per_peer_and_tag(mode):
    """Many messages on one (peer, tag), polled newest first, still match in post order."""
    fabric = Fabric(2)
    ts = [DeviceTransport(fabric.transport(r), mode, FakeBackend(polls=3)) for r in range(2)]
    msgs = [np.full(5 + i, i, np.int32) for i in range(8)]
    bufs = [np.zeros(5 + i, np.int32) for i in range(8)]
    recvs = [ts[1].irecv(b, 0, 21) for b in bufs]
    sends = [ts[0].isend(m, 1, 21) for m in msgs]
    for _ in range(200):
        done_r = [ts[1].test(h) for h in reversed(recvs)]
        done_s = [ts[0].test(h) for h in reversed(sends)]
        if all(done_r) and all(done_s):
            break
    else:
        pytest.fail("device transport did not finish")
    for m, b in zip(msgs, bufs):
        assert np.array_equal(m, b)


def test_ipc_size_mismatch_is_an_error():
    fabric = Fabric(2)
    ts = [DeviceTransport(fabric.transport(r), "ipc", FakeBackend(polls=0)) for r in range(2)]
    ts[0].isend(np.zeros(8, np.float32), 1, 21)
    with pytest.raises(CollectiveError, match="32 bytes, the receive has room for 16"):
        h = ts[1].irecv(np.zeros(4, np.float32), 0, 21)
        for _ in range(20):
            ts[0].testall([])
            ts[1].test(h)
            for op in list(ts[0]._channels[("send", 1, 21)]):
                op.step()


def test_host_buffers_bypass_the_device_path():
    fabric = Fabric(2)

    class HostOnly(FakeBackend):
        def is_device(self, buf):
            return False

    ts = [DeviceTransport(fabric.transport(r), "staged", HostOnly()) for r in range(2)]
    out = np.zeros(3)
    h = ts[1].irecv(out, 0, 5)
    s = ts[0].isend(np.ones(3), 1, 5)
    assert ts[1].test(h) and ts[0].test(s) and out.tolist() == [1, 1, 1]
    assert ts[0].backend.counts["d2h"] == 0
    assert make_device_transport(ts[0]) is ts[0]  # already a device transport


def test_mode_selection():
    with pytest.raises(ValueError, match="unknown device transport mode"):
        choose_mode(None, "nvlink")
    with pytest.raises(ValueError, match="needs a bootstrap"):
        choose_mode(None, "auto")
    from mpi4py import MPI

    from collectives.bootstrap.mpi import MpiBootstrap
    boot = MpiBootstrap(MPI.COMM_SELF)
    aware, why = cuda_aware_mpi()
    assert isinstance(aware, bool) and why
    assert choose_mode(boot, "auto") == "ipc"  # one rank is one node
    assert choose_mode(boot, "staged") == "staged"


def test_this_mpi_is_not_cuda_aware():
    """The PyPI Open MPI is built --without-cuda: detection must say no, with a reason."""
    aware, why = cuda_aware_mpi()
    assert not aware and ("= 0" in why or "no CUDA support query" in why)


# -------------------------------------------------- cupy present, no GPU
@pytest.fixture
def cupy_without_gpu(monkeypatch):
    """A stand-in cupy whose runtime reports no device, as on a CPU-only box."""
    class CUDARuntimeError(RuntimeError):
        pass

    def no_device():
        raise CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_device))
    cupy.ndarray = type("ndarray", (), {})
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)
    import collectives.kernels.cuda_kernels as ck
    ck._kernels_for_device.cache_clear()
    yield cupy
    ck._kernels_for_device.cache_clear()


def test_cpu_path_unaffected_when_cupy_has_no_gpu(cupy_without_gpu):
    import collectives.baselines.nccl  # noqa: F401
    import collectives.transport.device  # noqa: F401
    from collectives.kernels import kernels_for
    from collectives.kernels.cuda_kernels import cuda_kernels
    from collectives.teach.simulate import simulate

    assert kernels_for(np.zeros(3)).name == "numpy"
    with pytest.raises(RuntimeError, match="no CUDA device is usable"):
        cuda_kernels()
    from collectives.baselines.nccl import NcclAlgorithm
    with pytest.raises((RuntimeError, ValueError)):
        NcclAlgorithm(types.SimpleNamespace(comm=None))
    out = simulate(3, lambda c: c.all_reduce(np.arange(10.0) * (c.rank + 1)))
    assert all(np.array_equal(o, np.arange(10.0) * 6) for o in out)


def test_without_cupy_errors_are_clear(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    from collectives.kernels.cuda_kernels import cuda_kernels
    from collectives.baselines.nccl import _import_nccl
    from collectives.transport.device import CupyBackend
    with pytest.raises(RuntimeError, match="ringzero\\[gpu\\]"):
        cuda_kernels()
    with pytest.raises(RuntimeError, match="ringzero\\[gpu\\]"):
        _import_nccl()
    with pytest.raises(RuntimeError, match="ringzero\\[gpu\\]"):
        CupyBackend()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("world", [2, 3])
def test_mismatch_over_device_protocols_fails_on_every_rank(mode, world):
    """The ring posts its first device data before the header verdict; a count
    mismatch must still raise MismatchError on every rank (no hang, no other error)."""
    from collectives import MismatchError

    def fn(comm):
        comm.all_reduce(np.ones(5000 + 100 * (comm.rank == world - 1), np.float32))

    errors, _ = _run(world, mode, fn, return_errors=True, timeout=10, chunk_bytes=4096, small_bytes=1024)
    for r, e in enumerate(errors):
        assert isinstance(e, MismatchError), (r, repr(e))
        assert "count differs" in str(e) and f"rank {world - 1}: 5100" in str(e), str(e)


def test_auto_setup_has_a_deadline_under_mpirun(mpi):
    """Defect 12 of issue 11: the mode agreement was blocking MPI collectives (Split_type,
    allreduce) inside the first device collective; a rank that never joined hung it forever."""
    r = mpi(2, "device_setup.py", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": agreed ipc") == 2, r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("rank 0: raised"))
    assert "setup step 'allgather' timed out after 1 s" in line, line
    assert float(line.split("after ")[1].split(" s")[0]) < 5
    assert r.stdout.count(": done") == 2


@pytest.mark.parametrize("mode", MODES)
def test_profile_accounts_for_every_message_phase(mode):
    """DeviceTransport.profile: each message's phases are counted once (what
    gpu_collectives.py --bench prints per collective on the GPU), results unchanged."""
    from collectives.transport.device import Profile
    n = 3000
    phases = {"ipc": (("send.ready_wait", "send.ack_wait"), ("recv.ctrl_wait", "recv.pull_issue", "recv.copy_wait",
                                                            "recv.ack_send")),
              "staged": (("send.d2h_wait", "send.ack_wait"), ("recv.ctrl_wait", "recv.copy_wait")),
              "cuda_aware": (("send.ready_wait", "send.ack_wait"), ("recv.free_wait", "recv.ctrl_wait"))}[mode]

    def fn(comm):
        comm.transport.profile = prof = Profile()
        got = comm.all_reduce(np.arange(n, dtype=np.float32) * (comm.rank + 1))
        comm.transport.profile = None
        return got, prof.summary(), prof.line()

    results, _ = _run(2, mode, fn, chunk_bytes=1024, small_bytes=64)
    sends = []
    for got, summary, line in results:
        assert np.array_equal(got, np.arange(n, dtype=np.float32) * 3)
        assert set(summary) == set(phases[0]) | set(phases[1]), line
        nsend, nrecv = summary[phases[0][0]]["n"], summary[phases[1][0]]["n"]
        assert nsend > 2 and all(summary[p]["n"] == nsend for p in phases[0]), line
        assert all(summary[p]["n"] == nrecv for p in phases[1]), line
        assert all(v["total_us"] >= 0 for v in summary.values())
        sends.append((nsend, nrecv))
    assert sends[0][0] == sends[1][1] and sends[1][0] == sends[0][1]  # every message seen at both ends


def test_device_buffers_get_device_sized_chunks_unless_the_caller_chose():
    from collectives.tuning import defaults
    t = defaults()
    assert t.device_chunk_bytes >= 16 * t.chunk_bytes
    default = Communicator(transport=Fabric(1).transport(0))
    chosen = Communicator(transport=Fabric(1).transport(0), chunk_bytes=256 * 1024)
    assert default.device_chunk_bytes == t.device_chunk_bytes
    assert chosen.device_chunk_bytes == 256 * 1024  # tests and benches that set it keep theirs
    default.close()
    chosen.close()


def _ipc_all_reduce(world, waits, monkeypatch):
    """An all-reduce and a broadcast over ipc with each rank's stream_waits setting (waits[r])."""
    made = []
    real = DeviceTransport.__init__

    def init(self, host, mode, backend=None, stream_waits=None):
        real(self, host, mode, backend, waits[host.rank])
        made.append(self)
    monkeypatch.setattr(DeviceTransport, "__init__", init)
    n = 5000

    def fn(comm):
        x = (np.arange(n, dtype=np.float32) % 89) * (comm.rank + 1)
        return comm.all_reduce(x), comm.broadcast(np.full(999, comm.rank, np.int64), root=0)

    results, backends = _run(world, "ipc", fn, chunk_bytes=2048, small_bytes=64)
    for ar, bc in results:
        assert np.array_equal(ar, (np.arange(n, dtype=np.float32) % 89) * (world * (world + 1) // 2))
        assert (bc == 0).all()
    assert sorted(t.stream_waits for t in made) == sorted(waits)
    return backends


def test_ipc_stream_waits_replace_host_polls(monkeypatch):
    """Run 1 on the H200: each device chunk cost ~220 us, with two host polls of GPU events
    per message (the sender's producer, the receiver's copy). With stream waits the IPC path
    records interprocess events and queues stream waits instead: no event is host-polled, and
    every signal is waited on by the peer."""
    backends = _ipc_all_reduce(3, [True, True, True], monkeypatch)
    for b in backends:
        assert b.records == 0, b.counts  # no host-polled event on the IPC path
        assert b.counts["pull"] > 3 and b.counts["signal"] > 3
    assert sum(b.counts["signal"] for b in backends) == sum(b.counts["wait_signal"] for b in backends)


def test_ipc_without_stream_waits_and_mixed_ranks_stay_exact(monkeypatch):
    backends = _ipc_all_reduce(2, [False, False], monkeypatch)
    assert all(b.counts["signal"] == 0 and b.records > 0 for b in backends)
    monkeypatch.undo()
    _ipc_all_reduce(3, [True, False, True], monkeypatch)  # the messages carry who signalled


def test_ipc_stream_waits_off_by_environment(monkeypatch):
    monkeypatch.setenv("RINGZERO_IPC_STREAM_WAITS", "0")
    assert not DeviceTransport(Fabric(1).transport(0), "ipc", backend=FakeBackend()).stream_waits
    monkeypatch.delenv("RINGZERO_IPC_STREAM_WAITS")
    assert DeviceTransport(Fabric(1).transport(0), "ipc", backend=FakeBackend()).stream_waits
    assert not DeviceTransport(Fabric(1).transport(0), "staged", backend=FakeBackend()).stream_waits
