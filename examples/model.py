"""A small multi-layer perceptron in numpy, with its own forward and backward,
written unit by unit (one unit per layer) for ZeroOptimizer.

Data: a seeded teacher network labels Gaussian inputs into ``classes``
classes, so the repo generates its own data set and every rank can build
the same one.
"""
from __future__ import annotations

import contextlib

import numpy as np

F32 = np.float32


def init_units(sizes: list, seed: int = 0) -> dict:
    """``{"layer0": {"W": (d0, d1), "b": (d1,)}, ...}`` with He initialisation."""
    rng = np.random.default_rng(seed)
    units = {}
    for i, (din, dout) in enumerate(zip(sizes[:-1], sizes[1:])):
        units[f"layer{i}"] = {"W": (rng.standard_normal((din, dout)) * np.sqrt(2.0 / din)).astype(F32),
                              "b": (rng.standard_normal(dout) * 0.01).astype(F32)}
    return units


def make_data(n: int, d_in: int, classes: int, seed: int = 1):
    """n samples of (x, label) from a fixed random teacher."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d_in)).astype(F32)
    teacher = rng.standard_normal((d_in, classes)).astype(F32)
    y = np.argmax(np.tanh(x) @ teacher + 0.1 * rng.standard_normal((n, classes)), axis=1)
    return x, y.astype(np.int64)


def forward_backward(gather, reduce_grads, names: list, x: np.ndarray, y: np.ndarray,
                     loss_scale: float = 1.0, grad_factor: float = 1.0) -> float:
    """Mean cross-entropy of the batch, handing each unit's gradient to
    ``reduce_grads(unit, {"W": dW, "b": db})`` as soon as the backward has it.

    Args:
      gather: ``gather(unit)`` -> context manager yielding ``{"W", "b"}`` (any float dtype).
      reduce_grads: receives float32 gradients of ``loss * loss_scale * grad_factor``.
      names: unit names, input to output.
      grad_factor: e.g. 1/accumulation_steps.
    """
    acts = [x.astype(F32)]
    for i, u in enumerate(names):
        with gather(u) as p:
            h = acts[-1] @ p["W"].astype(F32) + p["b"].astype(F32)
        acts.append(np.maximum(h, 0) if i < len(names) - 1 else h)
    logits = acts[-1]
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    n = x.shape[0]
    loss = float(-logp[np.arange(n), y].mean())
    d = np.exp(logp)
    d[np.arange(n), y] -= 1
    d *= F32(loss_scale * grad_factor / n)
    for i in reversed(range(len(names))):
        a = acts[i]
        with gather(names[i]) as p:
            dx = d @ p["W"].astype(F32).T if i > 0 else None
        reduce_grads(names[i], {"W": a.T @ d, "b": d.sum(axis=0)})
        if dx is not None:
            d = dx * (acts[i] > 0)
    return loss


def local_gather(units: dict):
    """gather() over plain in-memory units (the single-process reference)."""
    return lambda u: contextlib.nullcontext(units[u])
