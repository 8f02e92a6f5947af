"""The array adapter (collectives/arrays.py) and the Communicator-level defects of issue 11.

torch CPU tensors of every supported dtype go through every collective on
simulated ranks and come back as torch tensors, bit for bit equal to numpy's
answer; ``out`` given comes back as that very object. The torch CUDA path
(DLPack to cupy, torch's current stream) runs here over a fake cupy and the
fake device backend of test_cuda_transport.py, and for real where a GPU is
(test_torch_cuda_on_a_gpu).
"""
from __future__ import annotations

import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from collectives import Communicator, simulate
from collectives.dtypes import to_dtype
from collectives.transport import Fabric
from inputs import data

torch = pytest.importorskip("torch")

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}


def tensor(a: np.ndarray, dtype: str):
    """A torch tensor holding numpy array ``a``'s values (exact: small integers)."""
    return torch.from_numpy(a.astype(np.float64)).to(TORCH_DTYPES[dtype])


def as_numpy(t, dtype: str) -> np.ndarray:
    return t.to(torch.float64).numpy().astype(to_dtype(dtype))


def test_import_collectives_does_not_import_torch():
    code = "import sys, collectives, collectives.arrays; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("world", [1, 2, 3])
def test_torch_cpu_every_dtype_every_collective(world):
    """Each result is a torch tensor of the input's dtype and shape, bit for bit numpy's answer."""
    n = 37  # uneven segments; TINY chunks run the ring, the default runs the small path
    counts = [n // world + (i < n % world) for i in range(world)]

    def fn(c):
        got = {}
        for name in TORCH_DTYPES:
            x = tensor(data(n, c.rank, np.float64), name)
            o = torch.empty_like(x)
            res = {
                "all_reduce": c.all_reduce(x),
                "all_reduce_max": c.all_reduce(x, op="max"),
                "reduce_scatter": c.reduce_scatter(x, counts=counts),
                "all_gather": c.all_gather(x[:counts[c.rank]].clone(), counts=counts),
                "broadcast": c.broadcast(x, root=world - 1),
                "out_is_out": c.all_reduce(x, out=o) is o,
                "input_untouched": torch.equal(x, tensor(data(n, c.rank, np.float64), name)),
            }
            y = x.clone()
            res["in_place_is_y"] = c.all_reduce(y, out=y) is y
            res["in_place"] = y
            got[name] = res
        return got

    for kw in (dict(chunk_bytes=16, small_bytes=0), {}):
        results = simulate(world, fn, **kw)
        xs = [data(n, r, np.float64) for r in range(world)]
        for name in TORCH_DTYPES:
            dt = to_dtype(name)
            total = np.sum(xs, axis=0).astype(dt)
            for r, res in enumerate(results):
                g = res[name]
                for key in ("all_reduce", "all_reduce_max", "reduce_scatter", "all_gather", "broadcast",
                            "in_place"):
                    assert isinstance(g[key], torch.Tensor) and g[key].dtype == TORCH_DTYPES[name], (name, key)
                assert g["out_is_out"] and g["in_place_is_y"] and g["input_untouched"], name
                assert as_numpy(g["all_reduce"], name).tobytes() == total.tobytes(), (name, r)
                assert as_numpy(g["in_place"], name).tobytes() == total.tobytes(), (name, r)
                assert as_numpy(g["all_reduce_max"], name).tobytes() == np.max(xs, 0).astype(dt).tobytes()
                lo = sum(counts[:r])
                assert as_numpy(g["reduce_scatter"], name).tobytes() == total[lo:lo + counts[r]].tobytes()
                gathered = np.concatenate([xs[q][:counts[q]] for q in range(world)])
                assert as_numpy(g["all_gather"], name).tobytes() == gathered.astype(dt).tobytes()
                assert as_numpy(g["broadcast"], name).tobytes() == xs[-1].astype(dt).tobytes()


def test_torch_keeps_shape_and_is_zero_copy():
    from collectives.arrays import adapt
    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    a = adapt(t)
    assert a.flat.dtype == to_dtype("bfloat16") and a.flat.shape == (12,) and a.obj is t and not a.device
    a.flat[0] = 5  # the view is the tensor's memory
    assert t[0, 0].item() == 5
    assert a.flat.__array_interface__["data"][0] == t.data_ptr()
    p = torch.nn.Parameter(torch.zeros(4))  # requires_grad and a subclass: still adapted
    assert adapt(p).obj is p
    res = simulate(2, lambda c: c.all_reduce(torch.ones(2, 3, dtype=torch.float64)))
    assert all(r.shape == (2, 3) and torch.equal(r, torch.full((2, 3), 2.0, dtype=torch.float64)) for r in res)


def test_torch_refusals_are_clear():
    c = Communicator(transport=Fabric(1).transport(0))
    try:
        with pytest.raises(ValueError, match="must be contiguous.*contiguous()"):
            c.all_reduce(torch.zeros(4, 4).t())
        with pytest.raises(TypeError, match="unsupported torch dtype torch.bits8"):
            c.all_reduce(torch.empty(4, dtype=torch.bits8))
        with pytest.raises(TypeError, match="op 'band' does not apply to dtype float32"):
            c.all_reduce(torch.zeros(4), op="band")
        with pytest.raises(TypeError, match="out has dtype"):
            c.all_reduce(torch.zeros(4), out=torch.zeros(4, dtype=torch.float64))
        with pytest.raises(ValueError, match="out has 3 elements, expected 4"):
            c.all_reduce(torch.zeros(4), out=torch.zeros(3))
        with pytest.raises(TypeError, match="numpy or cupy array or a torch tensor, got list"):
            c.all_reduce([1.0, 2.0])
        with pytest.raises(ValueError, match="read-only"):
            x = np.zeros(4)
            ro = np.zeros(4)
            ro.flags.writeable = False
            c.all_reduce(x, out=ro)
        # a host tensor with a numpy out is fine (both host); the result is out
        o = np.zeros(4, np.float32)
        assert c.all_reduce(torch.ones(4), out=o) is o and o.tolist() == [1, 1, 1, 1]
    finally:
        c.close()


# ------------------------------------------------ issue 11, defect 6
def test_all_gather_counts_none_and_explicit_even_counts_agree():
    """Rank 0 passes no counts, rank 1 passes [3, 3]: the same call. The old header
    counted x.size for one and sum(counts) for the other: false MismatchError."""
    def fn(c):
        x = np.full(3, c.rank, np.float32)
        return c.all_gather(x, counts=None if c.rank == 0 else [3, 3])

    for kw in (dict(small_bytes=0), {}):
        for got in simulate(2, fn, timeout=10, **kw):
            assert got.tolist() == [0, 0, 0, 1, 1, 1]


# ------------------------------------------------ issue 11, defect 9
@pytest.mark.parametrize("kw", [dict(chunk_bytes=16, small_bytes=0), {}], ids=["ring", "small"])
def test_partial_overlaps_are_refused_before_any_byte_moves(kw):
    """all_reduce with out shifted by one element over x gave silently wrong results;
    all_gather with x inside another rank's segment of out likewise. Now every
    collective refuses a partial overlap on every rank, and nothing was sent."""
    def fn(c):
        errors = []
        buf = np.arange(80, dtype=np.float32)
        for name, call in [
            ("all_reduce", lambda: c.all_reduce(buf[:32], out=buf[1:33])),
            ("broadcast", lambda: c.broadcast(buf[:32], out=buf[4:36])),
            ("reduce_scatter", lambda: c.reduce_scatter(buf[:32], out=buf[8:24])),
            ("reduce_scatter", lambda: c.reduce_scatter(buf[:32], out=buf[:16])),
            ("all_gather", lambda: c.all_gather(buf[(1 - c.rank) * 32:(1 - c.rank) * 32 + 32], out=buf[:64])),
            ("all_gather", lambda: c.all_gather(buf[c.rank * 32 + 1:c.rank * 32 + 33], out=buf[:64])),
        ]:
            try:
                call()
                errors.append(f"{name}: no error")
            except ValueError as e:
                if f"rank {c.rank}: {name}" not in str(e) or "overlap" not in str(e):
                    errors.append(f"{name}: {e}")
        assert np.array_equal(buf, np.arange(80, dtype=np.float32)), "a refused call wrote"
        # what stays allowed: exact aliasing (in place), and x as its own segment of out
        y = np.full(8, c.rank + 1.0)
        assert c.all_reduce(y, out=y) is y and y.tolist() == [3.0] * 8
        z = np.zeros(16)
        z[c.rank * 8:(c.rank + 1) * 8] = c.rank + 1
        c.all_gather(z[c.rank * 8:(c.rank + 1) * 8], out=z)
        assert z.tolist() == [1.0] * 8 + [2.0] * 8
        w = np.arange(8.0) * (c.rank + 1)
        c.broadcast(w, root=1, out=w.reshape(2, 4))  # another view of the same memory: in place
        assert w.tolist() == (np.arange(8.0) * 2).tolist()
        return errors

    for errors in simulate(2, fn, timeout=10, **kw):
        assert errors == []


def test_overlap_rule_on_adapted_arrays():
    from collectives.arrays import adapt, check_overlap
    buf = np.zeros(20, np.float64)
    a, b = adapt(buf[:10]), adapt(buf[10:])
    check_overlap("all_reduce", a, b)  # apart
    check_overlap("all_reduce", a, adapt(buf[:10].reshape(2, 5)))  # exact alias
    check_overlap("all_gather", adapt(buf[5:10]), adapt(buf), rank=1, offset=5)
    with pytest.raises(ValueError, match="rank 1: all_gather.*own segment of out \\(elements 10..15\\)"):
        check_overlap("all_gather", adapt(buf[5:10]), adapt(buf), rank=1, offset=10)
    with pytest.raises(ValueError, match="reduce_scatter.*must not overlap"):
        check_overlap("reduce_scatter", a, adapt(buf[:5]))
    t = torch.zeros(10)
    with pytest.raises(ValueError, match="partially overlap"):
        check_overlap("all_reduce", adapt(t[:6]), adapt(t[2:8]))
    check_overlap("all_reduce", adapt(np.zeros(0)), adapt(np.zeros(0)))


# ------------------------------------------------ issue 11, defect 11
@pytest.mark.parametrize("kw", [dict(chunk_bytes=16, small_bytes=0), {}], ids=["ring", "small"])
def test_half_avg_prescales_instead_of_overflowing(kw):
    """float16 avg of 30000 on 4 ranks: sum-then-divide overflows (120000 > 65504) to inf;
    dividing by N first, as NCCL does, gives 30000 exactly. bfloat16 and float32 too;
    integer avg keeps sum-then-truncate."""
    def fn(c):
        h = c.all_reduce(np.full(40, 30000, np.float16), op="avg")
        rs = c.reduce_scatter(np.full(40, 30000, np.float16), op="avg")
        b = c.all_reduce(np.full(40, 3e38, to_dtype("bfloat16")), op="avg")
        f = c.all_reduce(np.full(40, 3e38, np.float32), op="avg")
        i = c.all_reduce(np.full(5, -3 - c.rank, np.int32), op="avg")  # (-3-4-5-6)/4 = -4.5 -> -4
        return h, rs, b, f, i

    for h, rs, b, f, i in simulate(4, fn, **kw):
        assert h.tolist() == [30000.0] * 40 and rs.tolist() == [30000.0] * 10
        assert np.isfinite(b.astype(np.float32)).all() and np.isfinite(f).all()
        assert i.tolist() == [-4] * 5


# ------------------------------------------------ issue 11, defect 13a
def test_scratch_bytes_while_the_progress_thread_adds_a_buffer():
    """scratch_bytes() iterated the scratch dict itself; an insertion meanwhile (the
    progress thread allocating for an in-flight collective) raised "dictionary changed
    size during iteration". A buffer whose nbytes inserts stands in for that thread."""
    c = Communicator(transport=Fabric(1).transport(0))
    try:
        class Inserting:
            def __init__(self, key):
                self.key = key

            @property
            def nbytes(self):
                c.scratch[("meanwhile", self.key)] = np.zeros(2)
                return 8

        c.scratch.clear()
        c.scratch[("a",)] = Inserting(1)
        c.scratch[("b",)] = np.zeros(3)
        assert c.scratch_bytes() == 8 + 24
        # and under real concurrency: collectives in flight while another thread reads
        stop = threading.Event()
        errors = []

        def read():
            while not stop.is_set():
                try:
                    c.scratch_bytes()
                except RuntimeError as e:
                    errors.append(e)
                    return

        th = threading.Thread(target=read)
        th.start()
        for n in range(1, 200):
            c.all_reduce(np.zeros(n * 3, np.float32))
        stop.set()
        th.join(10)
        assert errors == []
    finally:
        c.close()


# ------------------------------------------------ torch CUDA, faked
class FakeCudaTensor:
    """What the adapter touches of a torch CUDA tensor, over a CPU tensor's memory."""

    __module__ = "torch"

    def __init__(self, cpu):
        self.cpu = cpu
        self.dtype = cpu.dtype
        self.shape = cpu.shape
        self.device = types.SimpleNamespace(type="cuda", index=0)

    def is_contiguous(self):
        return self.cpu.is_contiguous()

    def stride(self):
        return self.cpu.stride()

    def detach(self):
        return self

    def view(self, dtype):
        return FakeCudaTensor(self.cpu.view(dtype))

    def new_empty(self, shape):
        return FakeCudaTensor(self.cpu.new_empty(shape))


class FakeCupy(types.ModuleType):
    """from_dlpack hands out numpy views (the fake device backend's "device memory");
    streams and events are logged so the ordering plumbing can be checked."""

    def __init__(self):
        super().__init__("cupy")
        self.log = []
        log = self.log

        class Event:
            def __init__(self, where):
                self.where = where

        class Stream:
            def __init__(self, ptr, device_id=-1):
                self.ptr = ptr

            def __enter__(self):
                log.append(("current", self.ptr))
                return self

            def __exit__(self, *exc):
                log.append(("restore", self.ptr))

            def record(self):
                log.append(("record", self.ptr))
                return Event(self.ptr)

            def wait_event(self, ev):
                log.append(("wait", self.ptr, ev.where))

        class Device:
            def __init__(self, i):
                self.id = i

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                pass

        self.cuda = types.SimpleNamespace(ExternalStream=Stream, Device=Device,
                                          Stream=types.SimpleNamespace(null=Stream(0)))

    def from_dlpack(self, t):
        self.log.append(("dlpack", t.cpu.data_ptr()))
        return np.from_dlpack(t.cpu)


def test_torch_cuda_path_over_the_fake_device_backend(monkeypatch):
    """The CUDA half without a GPU: the tensor goes through DLPack (zero-copy), the
    header says device, the device transport (fake backend) moves it, the result is
    the caller's tensor object, and the collective is ordered after torch's current
    stream at the call and torch's stream after it when done."""
    from test_cuda_transport import _run

    from collectives.arrays import adapt
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=77))
    n = 301

    def fn(comm):
        r = comm.rank
        x = FakeCudaTensor(torch.arange(n, dtype=torch.float32) % 11 * (r + 1))
        hb = FakeCudaTensor(torch.full((n,), r + 1.0, dtype=torch.bfloat16))
        o = FakeCudaTensor(torch.empty(n))
        a = adapt(x)
        same = comm.all_reduce(x, out=o) is o
        road = comm.road_taken()
        return (a.device, same, o.cpu.clone(), comm.all_reduce(hb).cpu.clone(), comm.all_gather(x).cpu.clone(),
                road)

    results, backends = _run(3, "staged", fn, chunk_bytes=256, small_bytes=64)
    base = torch.arange(n, dtype=torch.float32) % 11
    for device, same, ar, bf, ag, road in results:
        assert device and same and road.value == "device-ring"  # the ring over the device transport
        assert torch.equal(ar, base * 6)
        assert bf.dtype == torch.bfloat16 and torch.equal(bf, torch.full((n,), 6.0, dtype=torch.bfloat16))
        assert torch.equal(ag, torch.cat([base * 1, base * 2, base * 3]))
    assert backends[0].counts["d2h"] > 0  # the device protocol moved it
    log = cupy.log
    assert ("dlpack" in {e[0] for e in log}) and ("current", 77) in log  # exported under torch's stream
    waits = [e for e in log if e[0] == "wait"]
    assert ("wait", 0, 77) in waits  # the default stream waited for torch's stream
    assert ("wait", 77, 0) in waits  # and torch's stream for ours


# ------------------------------------------------ torch CUDA, for real
def _has_gpu():
    try:
        import cupy
        return torch.cuda.is_available() and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def test_torch_cuda_on_a_gpu():
    """Real CUDA tensors on a side stream through simulated ranks (staged device transport):
    results land in the caller's tensors, ordered on torch's current stream."""
    if not _has_gpu():
        pytest.skip("needs torch with CUDA, cupy and a GPU")
    from collectives.transport.device import make_device_transport
    world, n = 2, 1 << 20 | 3
    fabric = Fabric(world)
    results, errors = [None] * world, [None] * world

    def body(r):
        comm = Communicator(transport=make_device_transport(fabric.transport(r), "staged"), timeout=60)
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                got = {}
                for name, dt in TORCH_DTYPES.items():
                    x = torch.arange(n, device="cuda") % 13 * (r + 1)
                    x = x.to(dt)  # queued on the side stream, right before the collective
                    o = torch.empty_like(x)
                    same = comm.all_reduce(x, out=o) is o
                    got[name] = (same, o.double().sum().item(), comm.all_gather(x[:5].clone()).cpu(),
                                 comm.reduce_scatter(x[:10].clone()).cpu(), comm.broadcast(x, root=1)[:4].cpu())
            s.synchronize()
            results[r] = got
        except BaseException as e:
            errors[r] = e
        finally:
            comm.close()

    ths = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(120)
    assert not any(t.is_alive() for t in ths)
    for e in errors:
        if e is not None:
            raise e
    base = torch.arange(n, dtype=torch.float64) % 13
    for r in range(world):
        for name, (same, total, ag, rs, bc) in results[r].items():
            assert same, name
            assert total == (base * 3).sum().item(), name
            assert ag.double().tolist() == (base[:5] * 1).tolist() + (base[:5] * 2).tolist(), name
            assert rs.double().tolist() == (base[:10] * 3)[r * 5:r * 5 + 5].tolist(), name
            assert bc.double().tolist() == (base[:4] * 2).tolist(), name


# ------------------------------------------------ real ranks
def test_torch_tensors_under_mpirun(mpi):
    """tests/mpi/torch_tensors.py: every dtype and collective on torch CPU tensors for
    the ring and the MPI baseline (in place and out given included), exact against numpy.
    Three ranks (one launch: torch's import costs ~2 s a rank); two ranks' exchange path
    is covered on simulated ranks above."""
    n = 3
    import json
    proc = mpi(n, "torch_tensors.py", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in res) == list(range(n)), proc.stdout + proc.stderr[-2000:]
    for r in res:
        assert r["nfail"] == 0, f"rank {r['rank']}: {r['nfail']} failures, e.g. {r['failures']}"
        assert r["cases"] == (6 * 4 * 7 + 1) + 2 * (6 * 5 * 7 + 1)


def test_kernels_for_knows_torch_without_importing_it():
    from collectives.kernels import NUMPY_KERNELS, is_device_array, kernels_for
    assert kernels_for(torch.zeros(3)) is NUMPY_KERNELS and not is_device_array(torch.zeros(3))
    assert is_device_array(FakeCudaTensor(torch.zeros(3)))
    assert kernels_for(np.zeros(3)) is NUMPY_KERNELS and not is_device_array(np.zeros(3))


def test_zero_stages_over_the_mpi_baseline(mpi):
    """Issue 11, defect 8, end to end: ZeroOptimizer at stages 0-3 over algorithm="mpi"
    (in-place all-reduce, all-gather with x inside out) trains as over the ring."""
    import json
    proc = mpi(2, "zero_mpi_baseline.py", timeout=240)
    res = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in res) == [0, 1], proc.stdout + proc.stderr[-3000:]
    for r in res:
        assert r["failures"] == [], r["failures"]
