"""Every CUDA kernel against its numpy reference, on a GPU (skipped without one).

Buffers are offset by 0..7 elements so the scalar head, the vectors and the
tail all run; half types and the fused optimizer steps must match the
reference bit for bit (NaN positions for NaN results).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from collectives.dtypes import DTYPES, HALF, KERNEL_DTYPES, bfloat16
from collectives.kernels import reference as R
from sharding import optim_ref as O
from sharding.optim import steps_for
from sharding.optim_cuda import CudaOptimSteps


def _cupy():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as e:  # ImportError, or no driver/device
        if os.environ.get("RZ_REQUIRE_GPU"):  # bench/gpu_check.sh: a skip there would hide a failure
            pytest.fail(f"RZ_REQUIRE_GPU is set but cupy or the GPU is unusable: {e}")
        pytest.skip(f"needs cupy and a CUDA GPU ({e})")
    return cupy


@pytest.fixture(scope="module")
def gpu():
    cp = _cupy()
    from collectives.kernels.cuda_kernels import cuda_kernels
    return cp, cuda_kernels()


def _dev(cp, host, off):
    """A device copy of host starting ``off`` elements into a fresh allocation."""
    flat = host.reshape(-1)
    buf = cp.empty(flat.size + off, dtype=flat.dtype)
    view = buf[off:]
    view.set(flat) if flat.size else None
    return view


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "iu":
        assert np.array_equal(got, want)
        return
    g32 = R.widen(got) if got.dtype.name in HALF or got.dtype == bfloat16 else got
    w32 = R.widen(want) if want.dtype.name in HALF or want.dtype == bfloat16 else want
    nan = np.isnan(w32)
    assert np.array_equal(np.isnan(g32), nan)
    rows = (got.size, got.dtype.itemsize)  # (n, -1) cannot reshape an empty array
    assert np.array_equal(got.view(np.uint8).reshape(rows)[~nan], want.view(np.uint8).reshape(rows)[~nan])


def _operands(name, n, seed):
    rng = np.random.default_rng(seed)
    dt = DTYPES[name][0]
    if name.startswith("int"):
        return [rng.integers(-1000, 1000, n).astype(dt) for _ in range(2)]
    a, b = [(rng.standard_normal(n) * 30).astype(np.float32) for _ in range(2)]
    if n > 4:
        a[:4], b[:4] = [np.nan, 1, np.inf, 0], [1, np.nan, 2, -0.0]
    if n > 10:  # subnormals in float32/bfloat16 (and 3e-6 in float16): flushed under -ftz=true
        a[4:10] = [1e-40, -2e-39, 1.4e-45, 3e-6, 1e-39, -1e-38]
        b[4:10] = [2e-40, 1e-39, 1.4e-45, -1e-6, -1e-39, 5e-39]
    return a.astype(dt), b.astype(dt)


@pytest.mark.parametrize("name", KERNEL_DTYPES)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_reduce(gpu, name, op):
    cp, k = gpu
    for n in (0, 1, 7, 33, 4099):
        a, b = _operands(name, n, n)
        want = R.reduce(op, a, b)
        for off_a, off_b in ((0, 0), (1, 1), (3, 0)):
            da, db = _dev(cp, a, off_a), _dev(cp, b, off_b)
            out = _dev(cp, np.zeros_like(a), off_a)
            k.reduce(op, da, db, out)
            _same(out.get(), want)
            k.reduce_(op, da, db)  # in place
            _same(da.get(), want)


@pytest.mark.parametrize("name", KERNEL_DTYPES)
def test_scale(gpu, name):
    cp, k = gpu
    a, _ = _operands(name, 1001, 5)
    for d in (1, 3, 4):
        x = _dev(cp, a, 1)
        k.scale(x, d)
        _same(x.get(), R.scale(a, d))


def test_cast(gpu):
    cp, k = gpu
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 1e3,
                        np.array([np.inf, -np.inf, np.nan, 65520, 65519, 1e-8, 3.4e38,
                                  1e-40, -3e-39, 1.4e-45, 3e-6, -6e-8], np.float32)])
    for dt in (bfloat16, np.float16):
        for off in (0, 1, 2):
            low = _dev(cp, np.zeros(x.size, dt), off)
            steps = steps_for(low)
            assert isinstance(steps, CudaOptimSteps)  # device arrays: the fused CUDA steps
            steps.cast(low, _dev(cp, x, off))
            _same(low.get(), O.cast(x, dt))
            back = _dev(cp, np.zeros(x.size, np.float32), 3)
            steps.cast(back, low)
            _same(back.get(), O.cast(O.cast(x, dt), np.float32))


@pytest.mark.parametrize("lowp", [None, bfloat16, np.float16])
def test_adamw_step(gpu, lowp):
    cp, k = gpu
    rng = np.random.default_rng(1)
    n = 10007
    p, g, m = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    v = np.abs(rng.standard_normal(n)).astype(np.float32)
    p[:6], g[:6], m[:6] = 1e-39, [1e-40, -1e-41, 3e-39, 0, 1e-38, -2e-39], 2e-40  # subnormals survive
    hp = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, step=7, grad_scale=0.5)
    want = O.adamw(p, g, m, v, **hp, lowp_dtype=lowp)
    for off in (0, 1):
        dp, dg, dm, dv = (_dev(cp, a, off) for a in (p, g, m, v))
        low = None if lowp is None else _dev(cp, np.zeros(n, lowp), off)
        steps_for(dp).adamw_step(dp, dg, dm, dv, **hp, out_lowp=low)
        for got, w in zip((dp, dm, dv), want[:3]):
            _same(got.get(), w)
        if lowp is not None:
            _same(low.get(), want[3])


@pytest.mark.parametrize("momentum,nesterov,first", [(0.0, False, False), (0.9, False, True),
                                                     (0.9, False, False), (0.9, True, False)])
def test_sgd_step(gpu, momentum, nesterov, first):
    cp, k = gpu
    rng = np.random.default_rng(2)
    n = 5003
    p, g, b = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    hp = dict(lr=0.1, momentum=momentum, dampening=0.0, weight_decay=0.01, nesterov=nesterov,
              first_step=first, grad_scale=2.0)
    want = O.sgd(p, g, b if momentum else None, **hp, lowp_dtype=bfloat16)
    dp, dg, db = _dev(cp, p, 1), _dev(cp, g, 1), _dev(cp, b, 1)
    low = _dev(cp, np.zeros(n, bfloat16), 1)
    steps_for(dp).sgd_step(dp, dg, db if momentum else None, **hp, out_lowp=low)
    _same(dp.get(), want[0])
    _same(low.get(), want[2])
    if momentum:
        _same(db.get(), want[1])


def test_against_the_numpy_set(gpu):
    """The two kernel sets agree (the numpy set is what the CPU ring uses)."""
    from collectives.kernels.numpy_kernels import NUMPY_KERNELS
    cp, k = gpu
    for name in KERNEL_DTYPES:
        a, b = _operands(name, 777, 9)
        out = np.empty_like(a)
        NUMPY_KERNELS.reduce("sum", a, b, out)
        d = _dev(cp, a, 0)
        k.reduce_("sum", d, _dev(cp, b, 0))
        _same(d.get(), out)
