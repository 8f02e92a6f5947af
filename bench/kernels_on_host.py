"""Every CUDA kernel of csrc/ run on the CPU, from its own source, against the numpy reference.

    python bench/kernels_on_host.py [--csrc DIR] [-v]

No GPU may be lent for a long time, so the kernels' real source runs here:
each .cu file, exactly as NVRTC gets it (collectives.kernels.cuda_kernels.
kernel_source, includes inlined), is compiled by g++ with a small shim
(bench/kernels_on_host.h: __global__, thread and block indices, vector
types, IEEE intrinsics, -ffp-contract=off) into a shared library, and every
thread of every launch runs, one after another.

The launches come from cuda_kernels.CudaKernels itself (and, for optim.cu
and the casts, sharding/optim_cuda.py through it), driven through a
stand-in for cupy whose NVRTC is g++ and whose device memory is host memory:
so the grid, block and head/vector/tail split are what launch.py computes,
the arguments are what cuda_kernels.py and optim_cuda.py pass (checked
against each kernel's parameter sizes), and the output is compared bit for
bit with collectives/kernels/reference.py (reduce, scale) and
sharding/optim_ref.py (casts, optimizer steps), NaN positions for NaN results. Inputs:
buffers at element offsets 0..7 (unaligned, phases that disagree), counts
with head and tail remainders, subnormals, NaN, +-Inf, -0, integer extremes,
bf16/f16 rounding ties, every 16-bit pattern for the widening casts; each
case runs on a full-device grid (132 SMs) and on a one-block grid (so the
grid-stride loops go round many times). Every buffer sits between guard
bytes, checked after each launch; a vector access that is not aligned (it
would fault on the GPU) is reported instead of run.

Ends with ``host run: K of N kernels equal the numpy reference``, N being
every ``extern "C"`` entry point in csrc/ (found in g++'s preprocessed
output, not taken from launch.py). Exit status 0 when K == N. Run by
tests/test_kernels_on_host.py (make test).
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from collectives.dtypes import DTYPES, HALF, KERNEL_DTYPES, bfloat16  # noqa: E402
from collectives.kernels import cuda_kernels as CK  # noqa: E402
from collectives.kernels import launch  # noqa: E402
from collectives.kernels import reference as R  # noqa: E402
from sharding import optim_ref as O  # noqa: E402
from sharding.optim_cuda import cuda_steps, optim_kernel  # noqa: E402  (registers optim.cu)

SHIM = Path(__file__).resolve().with_suffix(".h")
CXX = os.environ.get("CXX", "g++")
CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math",
            "-fno-strict-aliasing", "-w"]
CACHE = Path(os.environ.get("RZ_HOST_CACHE", Path(tempfile.gettempdir()) / "rz-kernels-on-host"))
ENTRY = re.compile(r'extern\s+"C"\s+void\s+(\w+)\s*\(')
UNSUPPORTED = re.compile(r"__shared__|__syncthreads|__shfl|atomic[A-Z]\w*\(|__syncwarp|cooperative_groups")
GUARD = 64  # guard bytes on each side of every buffer
GRIDS = ((132, 6), (1, 1))  # (SMs, blocks per SM): a full device, and one block


# ------------------------------------------------------------------ building
def _cxx(args, **kw):
    return subprocess.run([CXX, "-include", str(SHIM), *args], capture_output=True, text=True, timeout=300, **kw)


def entry_points(text: str) -> list[str]:
    """Every extern "C" function defined in ``text`` (after the preprocessor)."""
    r = _cxx(["-std=c++17", "-E", "-P", "-x", "c++", "-"], input=text)
    if r.returncode:
        raise RuntimeError(f"g++ -E failed:\n{r.stderr}")
    return ENTRY.findall(r.stdout)


def build(file: str, text: str, names: list[str], options) -> Path:
    """A shared library of ``text`` with a launcher rzhost_<name> per entry point (cached)."""
    bad = UNSUPPORTED.findall(text)
    if bad:
        raise RuntimeError(f"{file} uses {sorted(set(bad))}: threads that share memory or synchronize "
                           "cannot run one after another; this host run does not support them")
    trailer = "\n".join(
        f'extern "C" void rzhost_{n}(unsigned g, unsigned b, void** p) {{ rz_run({n}, g, b, p); }}\n'
        f'extern "C" int rzsizes_{n}(int* out) {{ return rz_param_sizes({n}, out); }}' for n in names)
    src = text + "\n// ---- host launchers (bench/kernels_on_host.py)\n" + trailer + "\n"
    defines = [o for o in options if o.startswith("-D")]  # e.g. -DRZ_UNROLL=1, as NVRTC gets it
    key = hashlib.sha256("\0".join([src, SHIM.read_text(), CXX, *CXXFLAGS, *defines]).encode()).hexdigest()[:16]
    lib = CACHE / f"{Path(file).stem}-{key}.so"
    if not lib.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        cpp = CACHE / f"{Path(file).stem}-{key}.cpp"
        cpp.write_text(src)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        r = _cxx([*CXXFLAGS, *defines, "-x", "c++", str(cpp), "-o", str(tmp)])
        if r.returncode:
            raise RuntimeError(f"g++ failed on {file} (NVRTC options {' '.join(options)}):\n{r.stderr[-4000:]}")
        os.replace(tmp, lib)
    return lib


# ------------------------------------------------------------ host "device"
class HostArray:
    """A 'device' array in host memory: 256-byte aligned like cudaMalloc, ``offset``
    elements in, between guard bytes that a kernel must not touch."""

    def __init__(self, host: np.ndarray, offset: int = 0):
        host = np.ascontiguousarray(host).reshape(-1)
        self.dtype, self.size = host.dtype, host.size
        self.nbytes = host.nbytes
        item = host.dtype.itemsize
        raw = np.empty(256 + 2 * GUARD + offset * item + self.nbytes, np.uint8)
        start = (-raw.ctypes.data) % 256
        self._raw = raw
        self._lo = start + GUARD + offset * item  # byte index of element 0
        self._fill = np.frombuffer(hashlib.sha256(b"guard").digest() * 3, np.uint8)[:GUARD]
        raw[self._lo - GUARD:self._lo] = self._fill
        raw[self._lo + self.nbytes:self._lo + self.nbytes + GUARD] = self._fill
        self.view = raw[self._lo:self._lo + self.nbytes].view(host.dtype)
        self.view[...] = host
        self.data = SimpleNamespace(ptr=raw.ctypes.data + self._lo)
        self.device = SimpleNamespace(id=0)
        self.flags = SimpleNamespace(c_contiguous=True)

    def reshape(self, *shape):
        return self

    def get(self) -> np.ndarray:
        return self.view.copy()

    def guards_intact(self) -> bool:
        r = self._raw
        return (np.array_equal(r[self._lo - GUARD:self._lo], self._fill)
                and np.array_equal(r[self._lo + self.nbytes:self._lo + self.nbytes + GUARD], self._fill))


_CTYPE = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.int64): ctypes.c_int64,
          np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}


def _is_array(a) -> bool:
    return isinstance(a, HostArray) or (hasattr(a, "data") and hasattr(a.data, "ptr") and hasattr(a, "dtype"))


def _param(a):
    """The argument as the driver would see it: (ctypes value, its size) - cupy's conversions."""
    if _is_array(a):
        return ctypes.c_void_p(a.data.ptr)
    if isinstance(a, np.generic):
        return _CTYPE[a.dtype](a.item())
    if isinstance(a, bool):
        return ctypes.c_bool(a)
    if isinstance(a, int):
        return ctypes.c_int64(a)
    if isinstance(a, float):
        return ctypes.c_double(a)
    raise TypeError(f"cannot pass {type(a).__name__} to a kernel")


class HostFunction:
    """One kernel of a host library, called like cupy's Function."""

    def __init__(self, lib, name: str, log: list):
        self.name, self.ptr, self.log = name, 0, log
        self._run = getattr(lib, f"rzhost_{name}")
        self._run.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        sizes = (ctypes.c_int * 64)()
        n = getattr(lib, f"rzsizes_{name}")(sizes)
        self.param_sizes = list(sizes[:n])

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        vals = [_param(a) for a in args]
        got = [ctypes.sizeof(v) for v in vals]
        if got != self.param_sizes:
            raise RuntimeError(f"{self.name}: arguments of sizes {got}, the kernel takes {self.param_sizes}")
        self._check_alignment(args)
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        self._run(grid[0], block[0], ptrs)
        at = next(i for i, a in enumerate(args) if isinstance(a, np.int64))
        self.log.append((self.name, grid[0], block[0], int(args[at + 3])))
        for a in args:
            if isinstance(a, HostArray) and not a.guards_intact():
                raise RuntimeError(f"{self.name}: wrote outside a buffer of {a.size} {a.dtype} (grid {grid}, block {block})")

    def _check_alignment(self, args):
        """Vector accesses at [head, head + nvec*V) must be aligned: on the GPU they fault otherwise."""
        arrays = [a for a in args if _is_array(a)]
        at = next(i for i, a in enumerate(args) if isinstance(a, np.int64))  # n, head, nvec, loose follow the buffers
        n, head, nvec, loose = (int(x) for x in args[at:at + 4])
        if nvec == 0:
            return
        width = launch.vector_width(*{a.dtype.itemsize for a in arrays})
        for k, a in enumerate(arrays):
            if loose >> k & 1:
                continue  # read element by element in the vector loop
            if (a.data.ptr + head * a.dtype.itemsize) % (width * a.dtype.itemsize):
                raise RuntimeError(f"{self.name}: vector access at {a.data.ptr + head * a.dtype.itemsize:#x} is not "
                                   f"{width * a.dtype.itemsize}-byte aligned (head {head}, n {n}): a GPU would fault")


class HostCupy:
    """What CudaKernels asks of cupy, answered on the host: NVRTC is g++, modules are .so files."""

    def __init__(self, sms: int, blocks_per_sm: int, log: list):
        programs: dict = {}
        me = self
        self.launched = log

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

        def create(src, name, headers, include_names):
            programs[len(programs) + 1] = {"src": src, "name": name}
            return len(programs)

        def compile_(prog, options):
            p = programs[prog]
            p["names"] = entry_points(p["src"])
            p["lib"] = build(p["name"], p["src"], p["names"], options)

        class Module:
            def load(self, image):
                self.lib = ctypes.CDLL(image.decode())

            def get_function(self, name):
                return HostFunction(self.lib, name, me.launched)

        nvrtc = SimpleNamespace(NVRTCError=NVRTCError, getSupportedArchs=lambda: (90,), getVersion=lambda: ("g++",),
                                createProgram=create, compileProgram=compile_,
                                getCUBIN=lambda prog: str(programs[prog]["lib"]).encode(),
                                getPTX=lambda prog: str(programs[prog]["lib"]).encode(),
                                destroyProgram=lambda prog: None, getProgramLog=lambda prog: "")
        driver = SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=lambda f, block, smem: blocks_per_sm,
                                 funcGetAttribute=lambda attr, f: 32)
        runtime = SimpleNamespace(getDeviceProperties=lambda dev: {"multiProcessorCount": sms})
        self.cuda = SimpleNamespace(Device=Device, nvrtc=nvrtc, driver=driver, runtime=runtime,
                                    function=SimpleNamespace(Module=Module),
                                    Stream=SimpleNamespace(null=SimpleNamespace(ptr=0)))


# -------------------------------------------------------------------- inputs
def _f32_specials() -> np.ndarray:
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -2e-39, 1.4e-45, 1.1754942e-38, 1.1754944e-38,
                     3.4028235e38, -3.4028235e38, 65504.0, 65520.0, 65519.996, 6e-8, -3e-6, 1.0, -1.0, 1.5],
                    np.float32)


def _ties(dt) -> tuple[np.ndarray, np.ndarray]:
    """Pairs whose float32 sum falls exactly halfway between two values of ``dt`` (both parities)."""
    half_ulp = 2.0 ** -8 if dt == bfloat16 else 2.0 ** -11
    ulp = 2 * half_ulp
    a = np.array([1.0, 1.0 + ulp, -1.0, -(1.0 + ulp), 2.0, 3.0 + 2 * ulp], np.float32)
    b = np.array([half_ulp, half_ulp, -half_ulp, -half_ulp, 2 * half_ulp, 2 * half_ulp], np.float32)
    return a, b


def operands(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = DTYPES[name][0]
    if name.startswith("int"):
        info = np.iinfo(dt)
        a = rng.integers(-1000, 1000, n).astype(dt)
        b = rng.integers(-1000, 1000, n).astype(dt)
        ext = np.array([info.max, info.min, -1, 0, info.max, info.min], dt)
        k = min(n, ext.size)
        a[:k], b[:k] = ext[:k], ext[::-1][:k]
        return a, b
    a = (rng.standard_normal(n) * 30).astype(np.float32)
    b = (rng.standard_normal(n) * 30).astype(np.float32)
    sp = _f32_specials()
    k = min(n, sp.size)
    a[:k], b[-k:] = sp[:k], sp[:k][::-1]
    if name in ("bfloat16", "float16"):
        ta, tb = _ties(DTYPES[name][0])
        j = min(max(n - k, 0), ta.size)
        a[k:k + j], b[k:k + j] = ta[:j], tb[:j]
    return a.astype(dt), b.astype(dt)


# ---------------------------------------------------------------- comparing
def same(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when equal bit for bit (NaN positions only, for NaN); else where they first differ."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"dtype/shape {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if got.dtype.kind in "iu":
        bad = np.flatnonzero(got != want)
    else:
        g = R.widen(got) if got.dtype.name in HALF or got.dtype == bfloat16 else got
        w = R.widen(want) if want.dtype.name in HALF or want.dtype == bfloat16 else want
        gb = got.view(np.uint8).reshape(got.size, -1)
        wb = want.view(np.uint8).reshape(want.size, -1)
        bad = np.flatnonzero((np.isnan(g) != np.isnan(w)) | (~np.isnan(w) & (gb != wb).any(axis=1)))
    if bad.size == 0:
        return None
    i = int(bad[0])
    return f"{bad.size} of {got.size} differ; first [{i}]: got {got[i]!r}, want {want[i]!r}"


# --------------------------------------------------------------------- cases
class Runner:
    """Runs the cases through CudaKernels on each grid; records which kernels ran and failed."""

    def __init__(self, verbose: bool, unroll: int | None = None):
        self.log: list = []
        self.sets = [CK.CudaKernels(HostCupy(sms, occ, self.log), unroll=unroll) for sms, occ in GRIDS]
        self.failures: dict = {}
        self.cases: dict = {}
        self.verbose = verbose

    def case(self, kernel: str, label: str, fn) -> None:
        """fn(k) runs one case on kernel set k and returns a mismatch text or None."""
        for k, (sms, occ) in zip(self.sets, GRIDS):
            before = len(self.log)
            try:
                why = fn(k)
            except Exception as e:  # a crash in one case is that kernel's failure, the others still run
                why = f"{type(e).__name__}: {e}"
            ran = {name for name, *_ in self.log[before:]}
            if why is None and kernel not in ran and ran:
                why = f"launched {sorted(ran)}, not {kernel}"
            self.cases[kernel] = self.cases.get(kernel, 0) + 1
            if why is not None:
                self.failures.setdefault(kernel, f"{label} on {sms} SMs x {occ} blocks: {why}")
                if self.verbose:
                    print(f"  mismatch {kernel} {label} ({sms} SMs): {why}")

    def launched(self) -> set:
        return {name for name, *_ in self.log}

    def loose_launches(self) -> dict:
        out: dict = {}
        for name, _, _, loose in self.log:
            out[name] = out.get(name, 0) + bool(loose)
        return out


def run_reduce(r: Runner) -> None:
    for name in KERNEL_DTYPES:
        for op in launch.REDUCE_OPS:
            kernel = launch.reduce_kernel(op, DTYPES[name][0])
            for n in (1, 7, 33, 1000, 4099, 20011):  # 20011: a one-block grid goes round the unrolled loop 5x
                a, b = operands(name, n, n)
                want = R.reduce(op, a, b)
                for oa, ob, oo in ((0, 0, 0), (1, 1, 1), (3, 0, 3), (0, 3, 3), (1, 2, 3), (5, 5, 2)):
                    def one(k, a=a, b=b, oa=oa, ob=ob, oo=oo):
                        da, db, do = HostArray(a, oa), HostArray(b, ob), HostArray(np.zeros_like(a), oo)
                        k.reduce(op, da, db, do)
                        why = same(do.get(), want)
                        if why is None:  # in place: out aliases a
                            k.reduce_(op, da, db)
                            why = same(da.get(), want)
                        return None if why is None else why
                    r.case(kernel, f"n={n} offsets={oa},{ob},{oo}", one)


def run_scale(r: Runner) -> None:
    for name in KERNEL_DTYPES:
        kernel = launch.scale_kernel(DTYPES[name][0])
        for n in (1, 9, 1001, 20011):
            a, _ = operands(name, n, 100 + n)
            for d in (1, 3, 4, 7):
                for off in (0, 1, 3):
                    def one(k, a=a, d=d, off=off):
                        x = HostArray(a, off)
                        k.scale(x, d)
                        return same(x.get(), R.scale(a, d))
                    r.case(kernel, f"n={n} divisor={d} offset={off}", one)


def run_cast(r: Runner) -> None:
    rng = np.random.default_rng(7)
    for dt in (bfloat16, np.float16):
        ta, tb = _ties(dt)
        x = np.concatenate([_f32_specials(), (ta + tb).astype(np.float32), -(ta + tb).astype(np.float32),
                            (rng.standard_normal(20000) * 1e3).astype(np.float32),
                            (rng.standard_normal(500) * 1e-39).astype(np.float32),
                            rng.integers(0, 2 ** 32, 500, dtype=np.uint64).astype(np.uint32).view(np.float32)])
        down = launch.cast_kernel(np.float32, dt)
        up = launch.cast_kernel(dt, np.float32)
        every = np.arange(1 << 16, dtype=np.uint16).view(dt)  # all 16-bit patterns
        for off_s, off_d in ((0, 0), (1, 1), (2, 1), (3, 3), (0, 3)):
            def one_down(k, off_s=off_s, off_d=off_d):
                low = HostArray(np.zeros(x.size, dt), off_d)
                cuda_steps(k).cast(low, HostArray(x, off_s))
                return same(low.get(), O.cast(x, dt))

            def one_up(k, off_s=off_s, off_d=off_d):
                wide = HostArray(np.zeros(every.size, np.float32), off_d)
                cuda_steps(k).cast(wide, HostArray(every, off_s))
                return same(wide.get(), O.cast(every, np.float32))
            r.case(down, f"offsets={off_s},{off_d}", one_down)
            r.case(up, f"all 65536 patterns, offsets={off_s},{off_d}", one_up)


def _optim_inputs(n: int, seed: int):
    rng = np.random.default_rng(seed)
    p, g, m = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    v = np.abs(rng.standard_normal(n)).astype(np.float32)
    k = min(n, 8)
    p[:k] = np.array([1e-39, -1e-40, 0.0, -0.0, 3.0, 1e-38, 2e-45, 1.0], np.float32)[:k]
    g[:k] = np.array([1e-40, -1e-41, np.inf, 0.0, np.nan, 1e-38, -2e-39, 1e-30], np.float32)[:k]
    m[:k] = 2e-40
    return p, g, m, v


def run_adamw(r: Runner) -> None:
    hps = [dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, step=1, grad_scale=1.0),
           dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-6, weight_decay=0.0, step=7, grad_scale=0.5),
           dict(lr=3e-4, beta1=0.3, beta2=0.999, eps=1e-8, weight_decay=0.1, step=3, grad_scale=1.0)]
    for lowp in launch.LOWP:
        kernel = optim_kernel("adamw", lowp)
        ldt = None if lowp is None else DTYPES[lowp][0]
        for n in (5, 1003):
            p, g, m, v = _optim_inputs(n, n)
            for i, hp in enumerate(hps):
                want = O.adamw(p, g, m, v, **hp, lowp_dtype=ldt)
                for off, off_g in ((0, 0), (1, 1), (2, 2), (0, 1), (3, 0)):  # grad at its own phase too
                    def one(k, hp=hp, want=want, off=off, off_g=off_g):
                        bufs = [HostArray(t, o) for t, o in ((p, off), (g, off_g), (m, off), (v, off))]
                        low = None if ldt is None else HostArray(np.zeros(n, ldt), off)
                        cuda_steps(k).adamw_step(*bufs, **hp, out_lowp=low)
                        for got, w in zip((bufs[0], bufs[2], bufs[3]), want[:3]):
                            why = same(got.get(), w)
                            if why:
                                return why
                        return None if low is None else same(low.get(), want[3])
                    r.case(kernel, f"n={n} hp#{i} offsets={off},{off_g}", one)


def run_sgd(r: Runner) -> None:
    hps = [dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, first_step=False),
           dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=False, first_step=True),
           dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=False, first_step=False),
           dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=True, first_step=False,
                grad_scale=2.0)]
    for lowp in launch.LOWP:
        kernel = optim_kernel("sgd", lowp)
        ldt = None if lowp is None else DTYPES[lowp][0]
        for n in (6, 1001):
            p, g, b, _ = _optim_inputs(n, 50 + n)
            for i, hp in enumerate(hps):
                mom = hp["momentum"] != 0
                want = O.sgd(p, g, b if mom else None, **hp, lowp_dtype=ldt)
                for off, off_g in ((0, 0), (3, 3), (0, 2)):
                    def one(k, hp=hp, want=want, off=off, off_g=off_g, mom=mom):
                        dp, dg = HostArray(p, off), HostArray(g, off_g)
                        db = HostArray(b, off) if mom else None
                        low = None if ldt is None else HostArray(np.zeros(n, ldt), off)
                        cuda_steps(k).sgd_step(dp, dg, db, **hp, out_lowp=low)
                        why = same(dp.get(), want[0])
                        if why is None and mom:
                            why = same(db.get(), want[1])
                        if why is None and low is not None:
                            why = same(low.get(), want[2])
                        return why
                    r.case(kernel, f"n={n} hp#{i} offsets={off},{off_g}", one)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csrc", default=None, help="kernel sources to run instead of csrc/ (e.g. a mutated copy)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--unroll", type=int, choices=launch.UNROLLS, default=None,
                    help="RZ_UNROLL variant of reduce.cu and cast.cu (default: the sources' own)")
    args = ap.parse_args(argv)
    if shutil.which(CXX) is None:
        print(f"host run: no {CXX} on PATH")
        return 2
    if args.csrc:  # a mutated copy: csrc/'s files and the registered ones that are in it
        alt = Path(args.csrc).resolve()
        launch.CSRC = alt
        for file in list(launch.SOURCES):
            if (alt / file).is_file():
                launch.SOURCES[file] = alt
    # N: every extern "C" entry point in the sources, from g++'s preprocessor, not from launch.py
    entries = {}
    for file in sorted(launch.SOURCES):
        for name in entry_points(CK.kernel_source(file)):
            entries[name] = file
    r = Runner(args.verbose, args.unroll)
    for part in (run_reduce, run_scale, run_cast, run_adamw, run_sgd):
        part(r)
    ran = r.launched()
    ok = 0
    for name in sorted(entries, key=lambda x: (entries[x], x)):
        if name not in ran:
            status = "FAIL (never launched: no case or no launch plan reaches it)"
        elif name in r.failures:
            status = f"FAIL {r.failures[name]}"
        else:
            status, ok = f"ok   ({r.cases.get(name, 0)} cases)", ok + 1
        print(f"  {entries[name]:<9} {name:<22} {status}")
    unknown = sorted(ran - set(entries))
    if unknown:
        print(f"  launched but not defined as extern \"C\" in csrc/: {unknown}")
    loose = r.loose_launches()
    print(f"  launches with an input read element by element (Split.loose): "
          f"{sum(loose.values())}, in {sum(1 for v in loose.values() if v)} kernels")
    print(f"host run: {ok} of {len(entries)} kernels equal the numpy reference")
    return 0 if ok == len(entries) and entries else 1


if __name__ == "__main__":
    sys.exit(main())
