"""The numpy references of the CUDA kernels (collectives/kernels/reference.py for
reduce and scale, sharding/optim_ref.py for the casts and optimizer steps)
against independent formulas: ml_dtypes and torch roundings, torch's
elementwise ops, torch.optim.AdamW and torch.optim.SGD. The GPU tests then
compare each CUDA kernel with these references."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from collectives.dtypes import DTYPES, HALF, KERNEL_DTYPES, bfloat16
from collectives.kernels import reference as R
from collectives.kernels.numpy_kernels import NUMPY_KERNELS
from sharding import optim_ref as O
from sharding.optim import steps_for

import torch  # noqa: E402  (pinned in requirements.txt: a missing torch must fail, not skip)

TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
         "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99, 65520,
                    3.3895314e38, 3.4028235e38, 1e-8, -1e-8, 5.96e-8, 2.98e-8, 2.9802322e-08, 6.1e-5,
                    1.17549435e-38, 1e-45, 0.1, 1 / 3], np.float32)


def _float32_sample(seed=0):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = (rng.standard_normal(50_000) * 10.0 ** rng.integers(-9, 6, 50_000)).astype(np.float32)
    return np.concatenate([bits, normal, SPECIAL])


def _torch_bits(x, dtype):
    return torch.from_numpy(x).to(dtype).view(torch.int16).numpy().view(np.uint16)


def test_bf16_rounding_matches_ml_dtypes_and_torch():
    x = _float32_sample()
    got = R.bf16_bits(x)
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], x[~nan].astype(ml_dtypes.bfloat16).view(np.uint16))
    assert np.array_equal(got[~nan], _torch_bits(x[~nan], torch.bfloat16))
    assert np.isnan(got[nan].view(bfloat16).astype(np.float32)).all()


def test_bf16_ties_round_to_even():
    k = np.arange(0, 0x7F80, 7, dtype=np.uint32)  # finite bf16 patterns
    tie = ((k << 16) | 0x8000).view(np.float32)  # exactly halfway to k + 1
    want = np.where(k % 2 == 0, k, k + 1).astype(np.uint16)
    assert np.array_equal(R.bf16_bits(tie), want)
    above = ((k << 16) | 0x8001).view(np.float32)
    below = ((k << 16) | 0x7FFF).view(np.float32)
    assert np.array_equal(R.bf16_bits(above), (k + 1).astype(np.uint16))
    assert np.array_equal(R.bf16_bits(below), k.astype(np.uint16))
    assert R.bf16_bits(np.float32(3.4028235e38)) == 0x7F80  # max float32 rounds to inf
    assert R.bf16_bits(np.float32(-np.inf)) == 0xFF80


def test_f16_rounding_matches_numpy_and_torch():
    x = _float32_sample(1)
    got = R.f16_bits(x)
    nan = np.isnan(x)
    with np.errstate(over="ignore"):
        want = x[~nan].astype(np.float16).view(np.uint16)
    assert np.array_equal(got[~nan], want)
    assert np.array_equal(got[~nan], _torch_bits(x[~nan], torch.float16))
    assert np.isnan(got[nan].view(np.float16)).all()


def test_f16_ties_round_to_even_including_subnormals():
    h = np.arange(0, 0x7C00 - 1, 3, dtype=np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    tie = ((lo + hi) / 2).astype(np.float32)  # exact in float32
    assert np.array_equal(tie.astype(np.float64), (lo + hi) / 2)
    want = np.where(h % 2 == 0, h, h + 1).astype(np.uint16)
    assert np.array_equal(R.f16_bits(tie), want)


def test_widen_is_exact():
    b = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
    fin = (b & 0x7F80) != 0x7F80
    assert np.array_equal(R.bf16_to_f32(b)[fin], b.view(bfloat16)[fin].astype(np.float32))
    hf = (b & 0x7C00) != 0x7C00
    assert np.array_equal(R.f16_to_f32(b)[hf], b.view(np.float16)[hf].astype(np.float32))


def _operands(name, n=4099, seed=0):
    rng = np.random.default_rng(seed)
    dt = DTYPES[name][0]
    if name.startswith("int"):
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        b = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        return a, b
    a = (rng.standard_normal(n) * 50).astype(np.float32)
    b = (rng.standard_normal(n) * 50).astype(np.float32)
    a[:6] = [np.nan, 1.0, np.inf, -np.inf, 0.0, 3.0]
    b[:6] = [2.0, np.nan, 1.0, -np.inf, -0.0, np.inf]
    return a.astype(dt), b.astype(dt)


TORCH_OPS = {"sum": torch.add, "prod": torch.mul, "max": torch.maximum, "min": torch.minimum}


@pytest.mark.parametrize("name", KERNEL_DTYPES)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_reduce_matches_torch_and_numpy_set(name, op):
    a, b = _operands(name)
    got = R.reduce(op, a, b)
    assert got.dtype == a.dtype
    ta = torch.from_numpy(a.view(np.int16) if name == "bfloat16" else a)
    tb = torch.from_numpy(b.view(np.int16) if name == "bfloat16" else b)
    if name == "bfloat16":
        ta, tb = ta.view(torch.bfloat16), tb.view(torch.bfloat16)
    want = TORCH_OPS[op](ta, tb)
    if name in HALF:  # one rounding of the float32 result
        want32 = TORCH_OPS[op](ta.float(), tb.float()).to(TORCH[name])
        assert torch.equal(want.view(torch.int16), want32.view(torch.int16)) or op == "prod"
        want = want32
    want = want.view(torch.int16).numpy() if name in HALF else want.numpy()
    got_cmp = got.view(np.int16) if name in HALF else got
    nan = np.isnan(got.astype(np.float64)) if name not in ("int32", "int64") else np.zeros(got.size, bool)
    assert np.array_equal(got_cmp[~nan], want[~nan])
    if name not in ("int32", "int64"):
        wnan = np.isnan(R.widen(got) if name in HALF else got)
        assert np.array_equal(nan, wnan)
    out = np.empty_like(a)
    NUMPY_KERNELS.reduce(op, a, b, out)
    assert np.array_equal(out.view(np.uint8).reshape(a.size, -1)[~nan], got.view(np.uint8).reshape(a.size, -1)[~nan])


def test_half_sums_accumulate_in_float32():
    a = np.full(4, 256.0, np.float32).astype(bfloat16)
    b = np.array([1.0, 1.5, 3.0, 0.5], np.float32).astype(bfloat16)
    # 257 and 256.5 are not bfloat16 values: one rounding of the exact f32 sum, ties to even
    assert R.reduce("sum", a, b).astype(np.float32).tolist() == [256.0, 258.0, 260.0, 256.0]
    h = np.array([2048.0], np.float16)
    assert R.reduce("sum", h, np.array([1.0], np.float16))[0] == 2048.0  # tie to even
    assert R.reduce("sum", h, np.array([3.0], np.float16))[0] == 2052.0


@pytest.mark.parametrize("name", ["int32", "int64"])
def test_avg_on_integers_truncates_toward_zero(name):
    dt = DTYPES[name][0]
    x = np.array([-7, 7, -1, 1, 0, -9, 9, np.iinfo(dt).max], dt)
    for d in (1, 2, 3, 4, 5):
        got = R.scale(x, d)
        want = torch.div(torch.from_numpy(x), d, rounding_mode="trunc").numpy()
        assert np.array_equal(got, want)
        y = x.copy()
        NUMPY_KERNELS.scale(y, d)
        assert np.array_equal(y, got)
    # avg = sum then scale: (-3) + (-4) over 2 ranks is -3, not -4
    assert R.scale(R.reduce("sum", np.array([-3], dt), np.array([-4], dt)), 2)[0] == -3


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
def test_scale_on_floats_divides_once(name):
    dt = DTYPES[name][0]
    x = (np.random.default_rng(3).standard_normal(1000) * 100).astype(np.float32).astype(dt)
    for d in (2, 3, 7):
        got = R.scale(x, d)
        if name in HALF:
            want = R.round_to(R.widen(x) / np.float32(d), dt)
            tx = torch.from_numpy(x.view(np.int16)).view(TORCH[name]) if name == "bfloat16" else torch.from_numpy(x)
            tw = (tx.float() / d).to(TORCH[name]).view(torch.int16).numpy()
            assert np.array_equal(got.view(np.int16), tw)
        else:
            want = x / dt.type(d)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
        y = x.copy()
        NUMPY_KERNELS.scale(y, d)
        assert np.array_equal(y.view(np.uint8), got.view(np.uint8))


def test_cast_round_trip():
    x = _float32_sample(2)[:10000]
    for dt in (bfloat16, np.float16):
        low = O.cast(x, dt)
        assert low.dtype == dt
        back = O.cast(low, np.float32)
        fin = np.isfinite(back)
        assert np.array_equal(back[fin], low[fin].astype(np.float32))
        assert np.array_equal(O.cast(back[fin], dt).view(np.uint16), low[fin].view(np.uint16))
    with pytest.raises(TypeError):
        O.cast(np.zeros(3, np.float16), bfloat16)


# -------------------------------------------------------------- optimizers
def _state(n=1031, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32),
            [rng.standard_normal(n).astype(np.float32) * np.float32(0.1) for _ in range(5)])


@pytest.mark.parametrize("wd,beta1", [(0.0, 0.9), (0.01, 0.9), (0.1, 0.3)])
def test_adamw_reference_matches_torch(wd, beta1):
    p0, grads = _state()
    hp = dict(lr=1e-2, beta1=beta1, beta2=0.999, eps=1e-8, weight_decay=wd)
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.AdamW([tp], lr=hp["lr"], betas=(beta1, 0.999), eps=1e-8, weight_decay=wd,
                            foreach=False)
    p, m, v = p0.copy(), np.zeros_like(p0), np.zeros_like(p0)
    for step, g in enumerate(grads, start=1):
        tp.grad = torch.from_numpy(g.copy())
        opt.step()
        p, m, v, _ = O.adamw(p, g, m, v, step=step, **hp)
        st = opt.state[tp]
        # torch's CPU lerp/addcmul use fused multiply-adds; the reference rounds
        # every op. Where m nearly cancels that shows as ~1e-8 absolute (g ~ 0.1).
        np.testing.assert_allclose(m, st["exp_avg"].numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(v, st["exp_avg_sq"].numpy(), rtol=1e-6, atol=1e-10)
        np.testing.assert_allclose(p, tp.detach().numpy(), rtol=2e-6, atol=1e-7)
    assert p.dtype == m.dtype == v.dtype == np.float32


def test_adamw_grad_scale_and_lowp_copy():
    p0, grads = _state()
    hp = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=3)
    m0, v0 = grads[1], np.abs(grads[2])
    a = O.adamw(p0, grads[0], m0, v0, **hp)
    b = O.adamw(p0, grads[0] * np.float32(1024), m0, v0, grad_scale=1 / 1024, **hp, lowp_dtype=bfloat16)
    for x, y in zip(a[:3], b[:3]):
        assert np.array_equal(x, y)  # scaling by a power of two is exact
    assert b[3].dtype == bfloat16 and np.array_equal(b[3], b[0].astype(bfloat16))
    c = O.adamw(p0, grads[0], m0, v0, **hp, lowp_dtype=np.float16)
    assert np.array_equal(c[3], c[0].astype(np.float16))
    with pytest.raises(ValueError):
        O.adamw(p0, grads[0], m0, v0, **{**hp, "step": 0})


@pytest.mark.parametrize("momentum,dampening,nesterov,wd", [
    (0.0, 0.0, False, 0.0), (0.0, 0.0, False, 0.01), (0.9, 0.0, False, 0.0),
    (0.9, 0.1, False, 0.01), (0.9, 0.0, True, 0.01)])
def test_sgd_reference_matches_torch(momentum, dampening, nesterov, wd):
    p0, grads = _state(seed=1)
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.SGD([tp], lr=0.05, momentum=momentum, dampening=dampening, nesterov=nesterov,
                          weight_decay=wd, foreach=False)
    p, buf = p0.copy(), None
    for i, g in enumerate(grads):
        tp.grad = torch.from_numpy(g.copy())
        opt.step()
        p, buf, low = O.sgd(p, g, buf, lr=0.05, momentum=momentum, dampening=dampening, weight_decay=wd,
                            nesterov=nesterov, first_step=i == 0, lowp_dtype=bfloat16)
        np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-7)
        assert np.array_equal(low, p.astype(bfloat16))
        if momentum:
            np.testing.assert_allclose(buf, opt.state[tp]["momentum_buffer"].numpy(), rtol=1e-6, atol=1e-7)
        else:
            assert buf is None


def test_host_optimizer_steps_agree_with_reference():
    """The steps sharding picks for host arrays (optim_numpy.py, torch's FMAs emulated)
    match the references the CUDA kernels follow."""
    p0, grads = _state(seed=4)
    p, m, v = p0.copy(), grads[1].copy(), np.abs(grads[2])
    low = np.empty(p.size, bfloat16)
    want = O.adamw(p, grads[0], m, v, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
                   step=2, lowp_dtype=bfloat16)
    steps_for(p).adamw_step(p, grads[0], m, v, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                            weight_decay=0.01, step=2, out_lowp=low)
    for got, w in zip((p, m, v), want[:3]):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-9)
