"""The review defects of issue 12 that only a GPU can show, one PASS/FAIL line each.

    python bench/gpu_defects.py [--json PATH]

- ftz: subnormal inputs and results survive reduce (f32, bf16), scale and
  AdamW, compiled the way cuda_kernels.py compiles them; an INFO line shows
  what cupy.RawModule (which appends -ftz=true) does to the same sum.
- copy: CudaKernels.copy between numpy 2 host arrays and device arrays.
- occupancy: for every kernel, the driver's blocks per SM equal the
  calculator's (launch.occupancy on its register count), no kernel uses
  local memory (spills), and a large launch's grid is one full wave.
- staged-streams: the staged transport copies down and up on two streams.
- nccl: the NCCL baseline loads (cupy.cuda.nccl over the nvidia-nccl wheel) and
  all-reduces on one rank.
Run by bench/gpu_check.sh; exits 1 when a check fails. On the host stand-in for cupy
(bench/stand_in.py) nccl and the RawModule comparison print "INFO ...: not on the host
stand-in" instead (it has neither), and occupancy, whose driver answers are the
stand-in's constants there, an INFO line in place of its PASS (a FAIL stays a FAIL).
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # appended: bench/collectives.py is not the package
from stand_in import not_on_host, on_host_stand_in  # noqa: E402
from collectives.dtypes import bfloat16  # noqa: E402
from collectives.kernels import launch  # noqa: E402
import sharding.optim_cuda  # noqa: E402,F401  (registers sharding/kernels/optim.cu)
from collectives.kernels import reference as R  # noqa: E402
from sharding import optim_ref as O  # noqa: E402

RESULTS: list = []


def check(name: str, ok: bool, text: str, stand_in_facts: bool = False, **data) -> None:
    """One PASS/FAIL line; with ``stand_in_facts`` on the host stand-in, a pass is an INFO line
    (the numbers it judged are the stand-in's constants, not a device's)."""
    RESULTS.append(dict(check=name, ok=bool(ok), text=text, **data))
    if ok and stand_in_facts and on_host_stand_in():
        print(not_on_host(name, f"the driver's answers are the stand-in's constants; the check's logic ran: {text}"),
              flush=True)
        return
    print(f"{'PASS' if ok else 'FAIL'} {name}: {text}", flush=True)


def not_here(name: str, why: str) -> None:
    """A check the host stand-in cannot perform at all: an INFO line, no result."""
    RESULTS.append(dict(check=name, ok=True, text=why, stand_in=True))
    print(not_on_host(name, why), flush=True)


def guarded(fn):
    """A check that raises is a FAIL line with the error, and the next check still runs."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001: report any failure as this check's
        traceback.print_exc()
        check(fn.__name__.removeprefix("check_"), False, f"raised {type(e).__name__}: {e}")


def bits(x) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(np.uint16 if x.itemsize == 2 else np.uint32 if x.itemsize == 4 else np.uint64)


def check_ftz():
    import cupy as cp
    from collectives.kernels.cuda_kernels import cuda_kernels
    from sharding.optim_cuda import cuda_steps
    k = cuda_kernels()
    a = np.array([1e-40, -2e-39, 1.4e-45, 1e-39, 5e-39, 3.0] * 11, np.float32)
    b = np.array([2e-40, 1e-39, 1.4e-45, -1e-39, -1e-38, 1e-40] * 11, np.float32)
    bad = []
    for dt in (np.float32, bfloat16):
        x, y = a.astype(dt), b.astype(dt)
        out = cp.empty(x.size, dt)
        k.reduce("sum", cp.asarray(x), cp.asarray(y), out)
        if not np.array_equal(bits(out.get()), bits(R.reduce("sum", x, y))):
            bad.append(f"reduce sum {np.dtype(dt).name}")
    d = cp.asarray(a)
    k.scale(d, 3)
    if not np.array_equal(bits(d.get()), bits(R.scale(a, 3))):
        bad.append("scale f32")
    p, g, m = a.copy(), b.copy(), a[::-1].copy()
    v = np.abs(b).astype(np.float32)
    hp = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, step=3)
    want = O.adamw(p, g, m, v, **hp)
    dp, dg, dm, dv = (cp.asarray(t) for t in (p, g, m, v))
    cuda_steps(k).adamw_step(dp, dg, dm, dv, **hp)
    if not all(np.array_equal(bits(got.get()), bits(w)) for got, w in zip((dp, dm, dv), want[:3])):
        bad.append("adamw f32")
    nonzero = int(np.count_nonzero(R.reduce("sum", a, b)[np.abs(R.reduce("sum", a, b)) < 1.2e-38]))
    opts = sorted({o for v_ in k.compiled_with.values() for o in v_})
    check("ftz", not bad and nonzero > 0,
          f"subnormal results bit-equal to numpy ({nonzero} subnormal sums per call)" if not bad
          else f"subnormals flushed or wrong in: {', '.join(bad)}", options=opts)
    # What the old path did: cupy.RawModule compiles with -ftz=true appended.
    if on_host_stand_in(cp):  # real cupy's own compile flags are the point
        print(not_on_host("ftz", "no cupy.RawModule to compare with: it shows real cupy's -ftz=true on a GPU"),
              flush=True)
        return
    try:
        mod = cp.RawModule(code='extern "C" __global__ void add(const float* a, const float* b, float* o)'
                                '{ o[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x]; }')
        o = cp.empty(4, cp.float32)
        mod.get_function("add")((1,), (4,), (cp.asarray(a[:4]), cp.asarray(b[:4]), o))
        print(f"INFO ftz: cupy.RawModule's a+b on subnormals gives {o.get().tolist()}, numpy "
              f"{(a[:4] + b[:4]).tolist()} (the defect the NVRTC path avoids)", flush=True)
    except Exception as e:  # informative only
        print(f"INFO ftz: the cupy.RawModule comparison did not run: {e}")


def check_copy():
    import cupy as cp
    from collectives.kernels.cuda_kernels import cuda_kernels
    k = cuda_kernels()
    host = np.arange(1001, dtype=np.float32)
    dev = cp.zeros(1001, cp.float32)
    k.copy(dev, host)
    back = np.zeros_like(host)
    k.copy(back, dev)
    k.synchronize()
    check("copy", np.array_equal(back, host) and np.array_equal(dev.get(), host),
          "CudaKernels.copy up from and down to numpy 2 arrays (which have .device too)")


def check_occupancy():
    import cupy as cp
    from collectives.kernels.cuda_kernels import cuda_kernels
    k = cuda_kernels()
    dev = cp.cuda.Device().id
    rows, bad = [], []
    for file, names in launch.kernel_names().items():
        for name in names:
            f = k._function(dev, name)
            regs = int(cp.cuda.driver.funcGetAttribute(4, f.ptr))   # NUM_REGS
            local = int(cp.cuda.driver.funcGetAttribute(3, f.ptr))  # LOCAL_SIZE_BYTES: spills
            occ = k.blocks_per_sm(dev, name)
            calc = launch.occupancy(regs)
            rows.append(dict(kernel=name, regs=regs, local_bytes=local, blocks_per_sm=occ, calculator=calc))
            if occ != calc or local:
                bad.append(f"{name} (regs {regs}, local {local} B, driver {occ}, calculator {calc})")
    sms = k._sm_count(dev)
    n = 1 << 26
    a = cp.ones(n, cp.float32)
    pl = launch.plan("rz_adamw_f32", n, [(a.data.ptr, 4)] * 4, sms, blocks_per_sm=k.blocks_per_sm(dev, "rz_adamw_f32"))
    wave = sms * k.blocks_per_sm(dev, "rz_adamw_f32")
    regs = sorted({r["regs"] for r in rows})
    check("occupancy", not bad and pl.grid == wave,
          f"{len(rows)} kernels, registers {regs[0]}..{regs[-1]}, blocks/SM "
          f"{min(r['blocks_per_sm'] for r in rows)}..{max(r['blocks_per_sm'] for r in rows)}, no local memory; "
          f"AdamW grid {pl.grid} = {sms} SMs x {wave // sms}" if not bad else "; ".join(bad[:6]),
          stand_in_facts=True, kernels=rows)


def check_staged_streams():
    import cupy as cp
    from collectives.transport.device import CupyBackend
    b = CupyBackend()
    x = cp.zeros(1024, cp.uint8)
    host = b.pinned(1024)
    e1 = b.d2h(host, x, b.record(x))
    e2 = b.h2d(x, host, b.record(x))
    streams = getattr(b, "streams_used", lambda: None)()
    cp.cuda.runtime.deviceSynchronize()
    ok = streams is not None and len({p for _, _, p in streams}) == 2 and e1.done() and e2.done()
    check("staged-streams", ok, f"staged copies down and up on {'two streams' if ok else streams}")


def check_nccl():
    """NCCL loads through cupy (the nvidia-nccl wheel of the CUDA major) and agrees with the ring, 1 rank."""
    import cupy as cp
    if on_host_stand_in(cp):
        return not_here("nccl", "it has no NCCL (cupy.cuda.nccl and the nvidia-nccl wheel are real cupy's)")
    from collectives import Communicator
    x = cp.asarray(np.arange(1000, dtype=np.float32))
    with Communicator(algorithm="nccl", timeout=10) as c:
        got = c.all_reduce(x)
    cp.cuda.runtime.deviceSynchronize()
    check("nccl", np.array_equal(got.get(), np.arange(1000, dtype=np.float32)),
          "Communicator(algorithm='nccl') all-reduce on 1 rank (the NCCL baseline loads)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    for fn in (check_ftz, check_copy, check_occupancy, check_staged_streams, check_nccl):
        guarded(fn)
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=1))
    return 0 if all(r["ok"] for r in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
