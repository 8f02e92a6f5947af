"""Fused optimizer steps and casts on device (cupy) arrays: sharding/kernels/optim.cu and
the casts of csrc/cast.cu, with optim_numpy.py's signatures.

The kernels are compiled, loaded and launched by collectives' CUDA kernel
set (CudaKernels.launch_kernel: NVRTC without flush-to-zero, occupancy
grids, the default stream), so this module only checks the arrays and
computes the float32 constants each launch passes. Their numpy reference is
optim_ref.py (optim_numpy.py's steps, which match torch bit for bit).
Importing this module needs no cupy.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from pathlib import Path

from collectives.dtypes import dtype_name
from collectives.kernels import launch

F32 = np.float32
KERNELS = Path(__file__).resolve().parent / "kernels"


def optim_kernel(kind: str, lowp_dtype=None) -> str:
    """rz_adamw_f32 / rz_sgd_f32, with _bf16 or _f16 when a low-precision copy is written."""
    if kind not in ("adamw", "sgd"):
        raise ValueError(f"unknown optimizer kernel {kind!r}")
    if lowp_dtype is None:
        return f"rz_{kind}_f32"
    name = dtype_name(lowp_dtype)
    if name not in ("bfloat16", "float16"):
        raise TypeError(f"out_lowp must be bfloat16 or float16, got {name}")
    return f"rz_{kind}_f32_{launch.suffix(name)}"


# optim.cu is compiled and launched by collectives' kernel set like its own kernels; it must not
# contract a*b+c into FMA: its result is compared bit for bit with the numpy reference, op by op
# in torch's order
launch.register("optim.cu", KERNELS, [optim_kernel(k, lp) for k in ("adamw", "sgd") for lp in launch.LOWP],
                ("--std=c++17", "--fmad=false"))


def _flat(x, what: str):
    if not x.flags.c_contiguous:
        raise ValueError(f"{what} must be contiguous")
    return x.reshape(-1)


def _same(what: str, first, *others) -> None:
    for o in others:
        if o.dtype != first.dtype or o.size != first.size:
            raise ValueError(f"{what}: arrays differ ({first.dtype}[{first.size}] vs {o.dtype}[{o.size}])")


def adamw_scalars(*, lr, beta1, beta2, eps, weight_decay, step, grad_scale=1.0) -> dict:
    """The float32 constants of one AdamW step (rz_adamw_*'s trailing arguments), computed
    in double as torch does."""
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    w1 = F32(1.0 - beta1)
    return dict(grad_scale=F32(grad_scale), decay=F32(1.0 - lr * weight_decay), w1=w1,
                one_minus_w1=F32(1.0) - w1, beta2=F32(beta2), c2=F32(1.0 - beta2),
                bc2_sqrt=F32(math.sqrt(bc2)), eps=F32(eps), neg_step=F32(-(lr / bc1)))


def sgd_scalars(*, lr, momentum, dampening, weight_decay, nesterov, first_step, grad_scale=1.0) -> dict:
    """The constants of one SGD step (rz_sgd_*'s trailing arguments)."""
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("nesterov needs momentum > 0 and dampening == 0 (as in torch.optim.SGD)")
    return dict(grad_scale=F32(grad_scale), wd=F32(weight_decay), momentum=F32(momentum),
                damp1=F32(1.0 - dampening), neg_lr=F32(-lr), has_wd=np.int32(weight_decay != 0),
                has_momentum=np.int32(momentum != 0), first_step=np.int32(bool(first_step)),
                nesterov=np.int32(bool(nesterov)))


class CudaOptimSteps:
    """adamw_step, sgd_step and cast on flat device arrays, through one CUDA kernel set.

    Args:
      kernels: a collectives.kernels.cuda_kernels.CudaKernels (it compiles and launches).
    """

    name = "cuda"

    def __init__(self, kernels):
        self.kernels = kernels

    def cast(self, dst, src) -> None:
        """dst = src converted (float32 to and from bfloat16/float16), round to nearest even."""
        if dst.size != src.size:
            raise ValueError(f"cast: {src.size} elements into {dst.size}")
        if dst.dtype == src.dtype:
            return self.kernels.copy(dst, src)
        dst, src = _flat(dst, "dst"), _flat(src, "src")
        self.kernels.launch_kernel(launch.cast_kernel(src.dtype, dst.dtype), src.size, [src, dst], (src, dst),
                                   readonly=(0,))

    def adamw_step(self, param, grad, exp_avg, exp_avg_sq, *, lr, beta1, beta2, eps, weight_decay,
                   step, grad_scale=1.0, out_lowp=None) -> None:
        """One fused AdamW step in place on flat float32 arrays (see sharding/kernels/optim.cu and
        optim_numpy.adamw_step for the arguments)."""
        bufs = [_flat(x, w) for x, w in ((param, "param"), (grad, "grad"), (exp_avg, "exp_avg"),
                                          (exp_avg_sq, "exp_avg_sq"))]
        if param.dtype != np.float32:
            raise TypeError(f"adamw_step works on float32 shards, got {param.dtype}")
        _same("adamw_step", *bufs)
        c = adamw_scalars(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                          step=step, grad_scale=grad_scale)
        planned, low = _lowp(bufs, out_lowp)
        tail = tuple(c[k] for k in ("grad_scale", "decay", "w1", "one_minus_w1", "beta2", "c2",
                                    "bc2_sqrt", "eps", "neg_step"))
        name = optim_kernel("adamw", None if out_lowp is None else out_lowp.dtype)
        self.kernels.launch_kernel(name, bufs[0].size, planned, (*bufs, low), tail, readonly=(1,))  # grad

    def sgd_step(self, param, grad, momentum_buf, *, lr, momentum, dampening, weight_decay, nesterov,
                 first_step, grad_scale=1.0, out_lowp=None) -> None:
        """One fused SGD (momentum, nesterov, weight decay) step in place (see sharding/kernels/optim.cu and
        optim_numpy.sgd_step for the arguments)."""
        p, g = _flat(param, "param"), _flat(grad, "grad")
        if p.dtype != np.float32:
            raise TypeError(f"sgd_step works on float32 shards, got {p.dtype}")
        c = sgd_scalars(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, first_step=first_step, grad_scale=grad_scale)
        bufs = [p, g]
        if c["has_momentum"]:
            if momentum_buf is None:
                raise ValueError("sgd_step: momentum != 0 needs momentum_buf")
            bufs.append(_flat(momentum_buf, "momentum_buf"))
        _same("sgd_step", *bufs)
        planned, low = _lowp(bufs, out_lowp)
        buf = bufs[2] if c["has_momentum"] else p  # never touched without momentum
        tail = tuple(c[k] for k in ("grad_scale", "wd", "momentum", "damp1", "neg_lr",
                                    "has_wd", "has_momentum", "first_step", "nesterov"))
        name = optim_kernel("sgd", None if out_lowp is None else out_lowp.dtype)
        self.kernels.launch_kernel(name, p.size, planned, (p, g, buf, low), tail, readonly=(1,))  # grad

    def synchronize(self) -> None:
        """Wait for every kernel the underlying kernel set launched."""
        self.kernels.synchronize()


def _lowp(bufs, out_lowp):
    if out_lowp is None:
        return bufs, bufs[0]  # the no-copy kernels ignore this pointer
    low = _flat(out_lowp, "out_lowp")
    if low.size != bufs[0].size:
        raise ValueError(f"out_lowp has {low.size} elements, the shard {bufs[0].size}")
    return bufs + [low], low


@functools.lru_cache(maxsize=None)
def cuda_steps(kernels) -> CudaOptimSteps:
    """The optimizer steps over CUDA kernel set ``kernels`` (one per set, so one per device)."""
    return CudaOptimSteps(kernels)
