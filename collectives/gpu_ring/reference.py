"""What the host ring computes, as an independent numpy model of its order.

The ring reduces segment s starting at rank s+1: acc = x[s+1], then acc = op(x[s+k], acc)
for k = 2 .. n (op(mine, incoming): the receiving rank's data first), in the
accumulate type (float32 for f16/bf16) and rounded back to the element type after
every op, so max(+0, -0), NaN payloads and float sums come out as the ring's. The
one-shot and two-shot kernels fold in the same order, so one model serves them all.
tests/test_ring_reference.py checks this model against collectives.simulate (the real
host ring on threads); the host build and bench/gpu_ring.py compare with it.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import accumulate_dtype
from .plan import offsets


def op2(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """op(a, b) elementwise as the kernels do it: widened, applied, rounded once."""
    acc = accumulate_dtype(a.dtype)
    x, y = a.astype(acc), b.astype(acc)
    with np.errstate(all="ignore"):
        if op == "sum":
            z = x + y
        elif op == "prod":
            z = x * y
        elif op == "max":
            z = np.where((x > y) | (x != x), x, y)
        elif op == "min":
            z = np.where((x < y) | (x != x), x, y)
        else:
            raise ValueError(f"unknown op {op!r}")
    return z.astype(a.dtype)


def ring_fold(op: str, parts: list[np.ndarray], s: int) -> np.ndarray:
    """Segment s reduced in the ring's order; ``parts[r]`` is rank r's copy of it."""
    n = len(parts)
    acc = parts[(s + 1) % n].copy()
    for k in range(2, n + 1):
        acc = op2(op, parts[(s + k) % n], acc)
    return acc


def expected(collective: str, xs: list[np.ndarray], counts: list[int], op: str | None = None) -> list[np.ndarray]:
    """Every rank's output of ``collective`` over inputs ``xs`` (one per rank).

    Args:
      collective: all_reduce, reduce_scatter or all_gather.
      xs: the ranks' inputs (all_gather: each rank's piece of counts[r] elements).
      counts: elements per segment.
      op: the reduction (not for all_gather).
    """
    n = len(xs)
    offs = offsets(counts)
    if collective == "all_gather":
        full = np.concatenate([np.asarray(x).reshape(-1) for x in xs])
        return [full.copy() for _ in range(n)]
    segs = [ring_fold(op, [x[offs[s]:offs[s + 1]] for x in xs], s) for s in range(n)]
    if collective == "reduce_scatter":
        return segs
    full = np.concatenate(segs) if segs else np.zeros(0, xs[0].dtype)
    return [full.copy() for _ in range(n)]


def same(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when equal bit for bit (NaN: positions only); else where they first differ."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"dtype/shape {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if got.size == 0:
        return None
    gb = got.view(np.uint8).reshape(got.size, -1)
    wb = want.view(np.uint8).reshape(want.size, -1)
    diff = (gb != wb).any(axis=1)
    if got.dtype.kind not in "iu":
        g, w = got.astype(np.float64), want.astype(np.float64)
        diff &= ~(np.isnan(g) & np.isnan(w))
    bad = np.flatnonzero(diff)
    if bad.size == 0:
        return None
    i = int(bad[0])
    return f"{bad.size} of {got.size} differ; first [{i}]: got {got[i]!r}, want {want[i]!r}"
