"""The numpy optimizer steps (sharding/optim_numpy.py) against torch.optim, step by step.

SGD matches torch.optim.SGD bit for bit. AdamW matches bit for bit a torch
replay of _single_tensor_adam whose only change is a correctly rounded sqrt;
against torch.optim.AdamW itself it is within 1e-6 relative (or 1e-6 * lr absolute), because
torch's vectorised CPU sqrt is off by one ulp on some elements (see
sharding/optim_numpy.py).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from sharding import optim_numpy as no
from sharding.optim import steps_for

import torch  # noqa: E402  (pinned in requirements.txt: a missing torch must fail, not skip)
K = steps_for(np.empty(0, np.float32))
SIZES = [1, 7, 33, 1000, 4099]


def _grads(rng, n, steps):
    # magnitudes over five decades, so small and large moments are both exercised
    return [(rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 1, n)).astype(np.float32) for _ in range(steps)]


def _torch_adamw_replay(p, grads, lr, b1, b2, eps, wd):
    """torch's single-tensor AdamW op sequence, with sqrt computed correctly rounded."""
    p, m, v = torch.tensor(p), torch.zeros(p.size), torch.zeros(p.size)
    for step, g in enumerate(grads, 1):
        g = torch.tensor(g)
        if wd != 0:
            p.mul_(1 - lr * wd)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
        denom = (v.double().sqrt().float() / bc2 ** 0.5).add_(eps)
        p.addcdiv_(m, denom, value=-(lr / bc1))
    return p.numpy(), m.numpy(), v.numpy()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("wd", [0.0, 0.01])
@pytest.mark.parametrize("b1", [0.9, 0.5, 0.3])  # torch's lerp switches formula at weight 1 - b1 >= 0.5
def test_adamw_matches_torch(n, wd, b1):
    rng = np.random.default_rng(n)
    p0 = rng.standard_normal(n).astype(np.float32)
    grads = _grads(rng, n, 6)
    hp = dict(lr=1e-2, beta1=b1, beta2=0.999, eps=1e-8, weight_decay=wd)

    p, m, v = p0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
    for step, g in enumerate(grads, 1):
        K.adamw_step(p, g, m, v, step=step, **hp)

    rp, rm, rv = _torch_adamw_replay(p0.copy(), grads, 1e-2, b1, 0.999, 1e-8, wd)
    np.testing.assert_array_equal(m, rm)
    np.testing.assert_array_equal(v, rv)
    np.testing.assert_array_equal(p, rp)

    tp = torch.tensor(p0.copy(), requires_grad=True)
    opt = torch.optim.AdamW([tp], lr=1e-2, betas=(b1, 0.999), eps=1e-8, weight_decay=wd, foreach=False)
    for g in grads:
        tp.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_array_equal(m, opt.state[tp]["exp_avg"].numpy())
    np.testing.assert_array_equal(v, opt.state[tp]["exp_avg_sq"].numpy())
    # a one-ulp denominator moves an update of size <= lr by far less than 1e-6 * lr
    np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-6 * 1e-2)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("momentum,dampening,wd,nesterov", [
    (0.0, 0.0, 0.0, False), (0.0, 0.0, 0.01, False), (0.9, 0.0, 0.0, False),
    (0.9, 0.1, 0.01, False), (0.9, 0.0, 0.01, True)])
def test_sgd_matches_torch_bit_for_bit(n, momentum, dampening, wd, nesterov):
    rng = np.random.default_rng(n + 1)
    p0 = rng.standard_normal(n).astype(np.float32)
    grads = _grads(rng, n, 5)
    p, buf = p0.copy(), np.zeros(n, np.float32)
    tp = torch.tensor(p0.copy(), requires_grad=True)
    opt = torch.optim.SGD([tp], lr=0.05, momentum=momentum, dampening=dampening, weight_decay=wd,
                          nesterov=nesterov, foreach=False)
    for i, g in enumerate(grads):
        K.sgd_step(p, g, buf, lr=0.05, momentum=momentum, dampening=dampening, weight_decay=wd,
                   nesterov=nesterov, first_step=i == 0)
        tp.grad = torch.tensor(g)
        opt.step()
        np.testing.assert_array_equal(p, tp.detach().numpy())


def test_grad_scale_is_one_float32_multiply_first():
    rng = np.random.default_rng(3)
    p0, g = rng.standard_normal(100).astype(np.float32), rng.standard_normal(100).astype(np.float32)
    a, b = p0.copy(), p0.copy()
    K.sgd_step(a, g, None, lr=0.1, momentum=0, dampening=0, weight_decay=0.01, nesterov=False,
               first_step=True, grad_scale=0.37)
    K.sgd_step(b, g * np.float32(0.37), None, lr=0.1, momentum=0, dampening=0, weight_decay=0.01,
               nesterov=False, first_step=True)
    np.testing.assert_array_equal(a, b)
    m1, v1, m2, v2 = (np.zeros(100, np.float32) for _ in range(4))
    a, b = p0.copy(), p0.copy()
    K.adamw_step(a, g, m1, v1, lr=1e-3, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0, step=1, grad_scale=2 ** -10)
    K.adamw_step(b, g * np.float32(2 ** -10), m2, v2, lr=1e-3, beta1=0.9, beta2=0.99, eps=1e-8,
                 weight_decay=0, step=1)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_out_lowp_and_cast_round_to_nearest_even(dtype):
    rng = np.random.default_rng(5)
    p = rng.standard_normal(1000).astype(np.float32)
    g = rng.standard_normal(1000).astype(np.float32)
    low = np.empty(1000, dtype)
    K.sgd_step(p, g, None, lr=0.1, momentum=0, dampening=0, weight_decay=0, nesterov=False,
               first_step=True, out_lowp=low)
    tdt = torch.bfloat16 if dtype is ml_dtypes.bfloat16 else torch.float16
    np.testing.assert_array_equal(low.astype(np.float32), torch.tensor(p).to(tdt).float().numpy())
    # ties: 1 + 2^-8 is halfway between two bfloat16 neighbours and rounds to the even one (1.0)
    back = np.empty(3, np.float32)
    src = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8)], np.float32)
    lowb = np.empty(3, ml_dtypes.bfloat16)
    K.cast(lowb, src)
    K.cast(back, lowb)
    np.testing.assert_array_equal(back, [1.0, 1 + 2 ** -6, -1.0])


def test_misuse_is_refused():
    p = np.zeros(4, np.float32)
    with pytest.raises(TypeError):
        K.adamw_step(p.astype(np.float64), p, p, p, lr=1, beta1=.9, beta2=.9, eps=1e-8, weight_decay=0, step=1)
    with pytest.raises(ValueError):
        K.adamw_step(p, np.zeros(3, np.float32), p, p, lr=1, beta1=.9, beta2=.9, eps=1e-8, weight_decay=0, step=1)
    with pytest.raises(ValueError):
        K.adamw_step(p, p, p.copy(), p.copy(), lr=1, beta1=.9, beta2=.9, eps=1e-8, weight_decay=0, step=0)
    with pytest.raises(ValueError):
        K.sgd_step(p, p, p.copy(), lr=1, momentum=0.9, dampening=0.5, weight_decay=0, nesterov=True,
                   first_step=True)
    with pytest.raises(ValueError):
        no.cast(np.zeros(3, np.float32), p)
