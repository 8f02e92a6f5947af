"""Optimizer descriptions for ZeroOptimizer: hyperparameters, the state they
need per element, and the step that updates one flat float32 shard. The
arithmetic is optim_numpy.py for host arrays and the fused CUDA kernels
(optim_cuda.py) for device arrays, picked by :func:`steps_for`; both match
torch.optim.AdamW and torch.optim.SGD: same defaults, same bias correction,
same order of operations.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from collectives.kernels import is_device_array, kernels_for

from . import optim_numpy
from .optim_cuda import cuda_steps


def steps_for(x):
    """The optimizer steps and casts (adamw_step, sgd_step, cast) for arrays like ``x``.

    optim_numpy for host arrays, the fused CUDA kernels on x's device for
    device arrays: the one place sharding chooses between them.
    """
    if not is_device_array(x):
        return optim_numpy
    return cuda_steps(kernels_for(x))


@dataclass
class AdamW:
    """torch.optim.AdamW (amsgrad=False). ``lr`` may be changed between steps."""
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01

    name = "adamw"

    def state_names(self) -> tuple:
        return ("exp_avg", "exp_avg_sq")

    def update(self, param, grad, state: dict, step: int, grad_scale: float = 1.0, out_lowp=None) -> None:
        """Update ``param`` (flat float32) in place from ``grad``; ``step`` is 1-based."""
        steps_for(param).adamw_step(param, grad, state["exp_avg"], state["exp_avg_sq"], lr=self.lr,
                                    beta1=self.betas[0], beta2=self.betas[1], eps=self.eps,
                                    weight_decay=self.weight_decay, step=step, grad_scale=grad_scale,
                                    out_lowp=out_lowp)

    def hparams(self) -> dict:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return {"name": self.name, **d}


@dataclass
class SGD:
    """torch.optim.SGD. ``lr`` may be changed between steps."""
    lr: float = 1e-3
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    dampening: float = 0.0

    name = "sgd"

    def __post_init__(self):
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def state_names(self) -> tuple:
        return ("momentum_buffer",) if self.momentum != 0 else ()

    def update(self, param, grad, state: dict, step: int, grad_scale: float = 1.0, out_lowp=None) -> None:
        """Update ``param`` (flat float32) in place from ``grad``; ``step`` is 1-based."""
        steps_for(param).sgd_step(param, grad, state.get("momentum_buffer"), lr=self.lr,
                                  momentum=self.momentum, dampening=self.dampening,
                                  weight_decay=self.weight_decay, nesterov=self.nesterov,
                                  first_step=step == 1, grad_scale=grad_scale, out_lowp=out_lowp)

    def hparams(self) -> dict:
        return {"name": self.name, **asdict(self)}


def optimizer_from_hparams(h: dict):
    """Rebuild an optimizer description from ``hparams()`` (checkpoints)."""
    h = dict(h)
    name = h.pop("name")
    if name == "adamw":
        h["betas"] = tuple(h["betas"])
        return AdamW(**h)
    if name == "sgd":
        return SGD(**h)
    raise ValueError(f"unknown optimizer {name!r} in checkpoint")
