"""Optimizer steps and casts on flat host (numpy) arrays: what ZeRO runs on
host shards, and the reference the fused CUDA kernels (optim_cuda.py) are
tested against (through optim_ref.py).

Every function works in place on 1-D float32 arrays and reproduces torch's
single-tensor CPU path (torch.optim.AdamW / SGD with foreach=False,
fused=False) operation by operation, in float32:

* a Python-float hyperparameter enters a float32 op as ``float32(x)``, as
  torch's CPU kernels convert scalars to the tensor's dtype;
* torch's vectorised CPU kernels compute ``add(a, b, alpha)`` and
  ``lerp(a, b, w)`` with a fused multiply-add. ``_fma`` reproduces that: the
  product of two float32 numbers is exact in float64, so one float64 add and
  one rounding to float32 give the fused result (a double rounding can differ
  in the last bit in rare ties; the tests measure it as zero).

Arithmetic per element (g = grad * grad_scale when grad_scale != 1):

AdamW (decoupled weight decay, amsgrad=False, maximize=False)::

    p = p * (1 - lr*wd)                        if wd != 0
    w = 1-b1                                   (torch lerp_, fused; two branches:)
    m = m + w * (g - m)                        if w < 0.5
    m = g + (w - 1) * (g - m)                  if w >= 0.5 (i.e. beta1 <= 0.5)
    v = v * b2;  v = ((1-b2) * g) * g + v      (torch mul_ then addcmul_, fused)
    bc1 = 1 - b1**step;  bc2 = 1 - b2**step    (Python floats, step 1-based)
    denom = sqrt(v) / sqrt(bc2) + eps
    p = p + ((-lr/bc1) * m) / denom            (torch addcdiv_)

One known difference: torch's vectorised CPU sqrt (AVX512/AVX2 builds) is
not correctly rounded and is off by one ulp on some elements; we use the
IEEE sqrt (as CUDA's __fsqrt_rn does). With a correctly rounded sqrt every
other op matches torch bit for bit (tests/test_optim.py checks both).

SGD::

    d = g + wd * p                             if wd != 0 (fused)
    buf = d                                    on the first step, if momentum != 0
    buf = buf * momentum + (1-dampening) * d   later steps (fused)
    d = d + momentum * buf if nesterov else buf
    p = p + (-lr) * d                          (fused)
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


def _fma(a, b, c, out: np.ndarray) -> np.ndarray:
    """out = round_f32(a*b + c) with one rounding of the exact product (see module doc)."""
    r = np.multiply(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    r += np.asarray(c, dtype=np.float64)
    out[...] = r
    return out


def _lerp_(start: np.ndarray, end: np.ndarray, w: np.float32) -> None:
    """start = torch.lerp(start, end, w) in place, as torch's vectorised CPU kernel:
    fma(w, end - start, start) for |w| < 0.5, else fma(w - 1, end - start, end)."""
    diff = end - start
    if abs(w) < 0.5:
        _fma(w, diff, start, out=start)
    else:
        _fma(w - F32(1), diff, end, out=start)


def _check(name: str, a: np.ndarray, n: int | None = None) -> None:
    if a.dtype != F32 or a.ndim != 1 or not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a contiguous 1-D float32 array, got {a.dtype} shape {a.shape}")
    if n is not None and a.size != n:
        raise ValueError(f"{name} has {a.size} elements, expected {n}")


def _scaled_grad(grad: np.ndarray, grad_scale: float) -> np.ndarray:
    if grad_scale == 1.0:
        return grad
    return grad * F32(grad_scale)


def _write_lowp(out_lowp, param: np.ndarray) -> None:
    if out_lowp is not None:
        if out_lowp.size != param.size:
            raise ValueError(f"out_lowp has {out_lowp.size} elements, param has {param.size}")
        cast(out_lowp, param)


def adamw_step(param: np.ndarray, grad: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, *,
               lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
               grad_scale: float = 1.0, out_lowp=None) -> None:
    """One AdamW step in place, bit for bit torch.optim.AdamW's CPU single-tensor path.

    Args:
      param, grad, exp_avg, exp_avg_sq: flat float32 arrays of one size.
      lr, beta1, beta2, eps, weight_decay: hyperparameters (Python floats).
      step: 1-based step count, for the bias corrections.
      grad_scale: grad is multiplied by float32(grad_scale) first (unscaling, clipping).
      out_lowp: optional bfloat16/float16 array receiving the new param rounded to nearest even.
    """
    n = param.size
    for name, a in (("param", param), ("grad", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
        _check(name, a, n)
    if step < 1:
        raise ValueError(f"step is 1-based, got {step}")
    g = _scaled_grad(grad, grad_scale)
    if weight_decay != 0:
        param *= F32(1 - lr * weight_decay)
    _lerp_(exp_avg, g, F32(1 - beta1))
    exp_avg_sq *= F32(beta2)
    _fma(F32(1 - beta2) * g, g, exp_avg_sq, out=exp_avg_sq)
    bc1 = 1 - beta1 ** step
    bc2 = 1 - beta2 ** step
    step_size = lr / bc1
    denom = np.sqrt(exp_avg_sq)
    denom /= F32(bc2 ** 0.5)
    denom += F32(eps)
    param += (F32(-step_size) * exp_avg) / denom
    _write_lowp(out_lowp, param)


def sgd_step(param: np.ndarray, grad: np.ndarray, momentum_buf, *, lr: float, momentum: float,
             dampening: float, weight_decay: float, nesterov: bool, first_step: bool,
             grad_scale: float = 1.0, out_lowp=None) -> None:
    """One SGD step in place, bit for bit torch.optim.SGD's CPU single-tensor path.

    Args:
      param, grad: flat float32 arrays.
      momentum_buf: flat float32 array (unused, may be None, when momentum == 0).
      first_step: True when the momentum buffer has not been initialised yet
        (torch sets it to the gradient then).
      grad_scale: grad is multiplied by float32(grad_scale) first.
      out_lowp: optional bfloat16/float16 array receiving the new param.
    """
    n = param.size
    _check("param", param)
    _check("grad", grad, n)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("nesterov momentum needs momentum > 0 and dampening == 0")
    g = _scaled_grad(grad, grad_scale)
    if weight_decay != 0:
        g = _fma(param, F32(weight_decay), g, out=np.empty_like(param))
    if momentum != 0:
        _check("momentum_buf", momentum_buf, n)
        if first_step:
            np.copyto(momentum_buf, g)
        else:
            momentum_buf *= F32(momentum)
            _fma(g, F32(1 - dampening), momentum_buf, out=momentum_buf)
        if nesterov:
            g = _fma(momentum_buf, F32(momentum), g, out=np.empty_like(param))
        else:
            g = momentum_buf
    _fma(g, F32(-lr), param, out=param)
    _write_lowp(out_lowp, param)


def cast(dst, src) -> None:
    """dst[...] = src converted (float32 <-> bfloat16/float16/float32), round to nearest even."""
    if dst.size != src.size:
        raise ValueError(f"cast: dst has {dst.size} elements, src has {src.size}")
    dst.reshape(-1)[...] = src.reshape(-1).astype(dst.dtype)
