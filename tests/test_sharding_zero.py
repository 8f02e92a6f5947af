"""ZeroOptimizer: every stage and world size trains the example model to the
weights of a single-process full-batch run with torch.optim (float32, 1e-6
relative), for SGD and AdamW, with and without clipping and accumulation.
Simulated ranks (threads); tests/test_sharding_mpi.py repeats a few under mpirun."""
from __future__ import annotations

import functools
import sys
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from sharding import SGD, AdamW, ZeroOptimizer
from sharding.buckets import Pending
from collectives import simulate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from model import forward_backward, init_units, local_gather, make_data  # noqa: E402

import torch  # noqa: E402  (pinned in requirements.txt: a missing torch must fail, not skip)

SIZES = [6, 20, 13, 5]  # odd sizes: parameters straddle shards, padding is exercised
NAMES = [f"layer{i}" for i in range(len(SIZES) - 1)]
BATCH, STEPS = 24, 3
X, Y = make_data(BATCH, SIZES[0], SIZES[-1])
OPTS = {"sgd": lambda: SGD(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
        "adamw": lambda: AdamW(lr=1e-2, weight_decay=0.01)}
CLIP = 0.5


@functools.lru_cache(maxsize=None)
def reference(opt_name: str, clip: float | None, steps: int = STEPS):
    """Single process, full batch, torch.optim (+ torch's clip_grad_norm_). Returns (weights, norms)."""
    units = init_units(SIZES)
    tparams = {(u, k): torch.tensor(v, requires_grad=True) for u, d in units.items() for k, v in d.items()}
    o = OPTS[opt_name]()
    if opt_name == "sgd":
        topt = torch.optim.SGD(list(tparams.values()), lr=o.lr, momentum=o.momentum,
                               weight_decay=o.weight_decay, nesterov=o.nesterov, foreach=False)
    else:
        topt = torch.optim.AdamW(list(tparams.values()), lr=o.lr, betas=o.betas, eps=o.eps,
                                 weight_decay=o.weight_decay, foreach=False)
    norms = []
    for _ in range(steps):
        cur = {u: {k: tparams[u, k].detach().numpy().copy() for k in d} for u, d in units.items()}
        grads = {}
        forward_backward(local_gather(cur), lambda u, g: grads.__setitem__(u, g), NAMES, X, Y)
        for (u, k), t in tparams.items():
            t.grad = torch.tensor(grads[u][k])
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(tparams.values()), clip)))
        else:
            norms.append(float(torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(t.grad) for t in tparams.values()]))))
        topt.step()
    return {u: {k: tparams[u, k].detach().numpy().copy() for k in d} for u, d in units.items()}, norms


def train(world, stage, opt_name, clip=None, accum=1, steps=STEPS, **kw):
    """Train on ``world`` simulated ranks; each rank's local batch split into ``accum`` micro-batches."""
    def fn(comm):
        seed = 0 if comm.rank == 0 else 99  # other ranks' weights are replaced by rank 0's broadcast
        opt = ZeroOptimizer(init_units(SIZES, seed=seed), comm, stage, OPTS[opt_name](), max_grad_norm=clip, **kw)
        n = BATCH // world
        xs, ys = X[comm.rank * n:(comm.rank + 1) * n], Y[comm.rank * n:(comm.rank + 1) * n]
        m = n // accum
        norms = []
        for _ in range(steps):
            for a in range(accum):
                forward_backward(opt.gather, opt.reduce_grads, NAMES, xs[a * m:(a + 1) * m], ys[a * m:(a + 1) * m],
                                 loss_scale=opt.loss_scale, grad_factor=1.0 / accum)
            norms.append(opt.step())
        return opt.full_params(), norms, opt
    return simulate(world, fn)


def assert_weights_close(got, want, rtol=1e-6, atol=1e-7):
    for u in want:
        for k in want[u]:
            np.testing.assert_allclose(got[u][k], want[u][k], rtol=rtol, atol=atol, err_msg=f"{u}.{k}")


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
@pytest.mark.parametrize("clip,accum", [(None, 1), (CLIP, 1), (None, 2), (CLIP, 2)])
def test_matches_single_process_torch(world, stage, opt_name, clip, accum):
    want, want_norms = reference(opt_name, clip)
    results = train(world, stage, opt_name, clip, accum)
    if clip is not None:
        assert want_norms[0] > CLIP  # the test really clips
    for params, norms, _ in results:  # every rank ends with the same weights
        assert_weights_close(params, want)
        np.testing.assert_allclose(norms, want_norms, rtol=1e-5)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("reduce_dtype", [None, ml_dtypes.bfloat16])
@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_bfloat16_stays_near_float32(stage, reduce_dtype, opt_name):
    """bfloat16 compute weights (8-bit mantissa), float32 master, 3 steps. Stated
    tolerance, as relative L2 error per tensor against the float32 run: weight
    matrices 2e-2 (measured 0.2-1.1%, AdamW the larger), biases 6e-2 (measured up to 4.8%: they
    start near zero, so their value is all accumulated update)."""
    want, _ = reference(opt_name, None)
    for params, _, opt in train(2, stage, opt_name, param_dtype=ml_dtypes.bfloat16, reduce_dtype=reduce_dtype):
        for u in want:
            for k, tol in (("W", 2e-2), ("b", 6e-2)):
                err = np.linalg.norm(params[u][k] - want[u][k]) / np.linalg.norm(want[u][k])
                assert err < tol, f"{u}.{k}: relative error {err:.3g}"
        for u in opt.units.values():  # compute weights are the master rounded to bfloat16
            np.testing.assert_array_equal(u.pshard, u.master.astype(ml_dtypes.bfloat16))


def test_initial_weights_come_from_rank_0():
    def fn(comm):
        units = {"u": {"w": np.full(5, float(comm.rank + 1), np.float32)}}
        opt = ZeroOptimizer(units, comm, 3, SGD(lr=0.1))
        return opt.full_params()["u"]["w"]
    for w in simulate(3, fn):
        np.testing.assert_array_equal(w, np.ones(5, np.float32))


def test_float16_overflow_skips_the_step_on_every_rank():
    def fn(comm):
        units = {"u": {"w": np.arange(10, dtype=np.float32)}, "v": {"w": np.ones(3, np.float32)}}
        opt = ZeroOptimizer(units, comm, 2, SGD(lr=0.5), param_dtype=np.float16)
        s0 = opt.loss_scale
        g = np.full(10, s0, np.float32)
        bad = g.copy()
        if comm.rank == 1:
            bad[3] = np.inf
        opt.reduce_grads("u", {"w": bad})
        opt.reduce_grads("v", {"w": np.zeros(3, np.float32)})
        norm = opt.step()
        before = opt.full_params()
        assert norm == float("inf") and opt.loss_scale == s0 / 2 and opt.step_count == 0
        np.testing.assert_array_equal(before["u"]["w"], np.arange(10, dtype=np.float32))
        opt.reduce_grads("u", {"w": g * np.float32(0.5)})  # scaled by the new scale: a true gradient of 1
        opt.reduce_grads("v", {"w": np.zeros(3, np.float32)})
        norm = opt.step()
        assert opt.step_count == 1 and abs(norm - np.sqrt(10)) < 1e-6
        return opt.full_params()["u"]["w"]
    for w in simulate(2, fn):
        np.testing.assert_array_equal(w, np.arange(10, dtype=np.float32) - np.float32(0.5))


def test_misuse_fails_at_once():
    def fn(comm):
        opt = ZeroOptimizer({"a": {"w": np.ones(8, np.float32)}, "b": {"w": np.ones(4, np.float32)}},
                            comm, 3, SGD(lr=0.1))
        with pytest.raises(KeyError, match="unknown unit"):
            opt.reduce_grads("c", {})
        with pytest.raises(KeyError, match="the unit has"):
            opt.reduce_grads("a", {"x": np.ones(8, np.float32)})
        with pytest.raises(ValueError, match="shape"):
            opt.reduce_grads("a", {"w": np.ones(9, np.float32)})
        with opt.gather("a"):
            with pytest.raises(RuntimeError, match="entered again"):
                with opt.gather("a"):
                    pass
        opt.step()
        return True
    assert all(simulate(2, fn))
    p = Pending("reduce-scatter", "a")
    with pytest.raises(RuntimeError, match="never launched"):
        p.wait()
    with pytest.raises(ValueError, match="stage"):
        ZeroOptimizer({"a": {"w": np.ones(2, np.float32)}}, None, 4, SGD())
    with pytest.raises(TypeError, match="optimizer"):
        ZeroOptimizer({"a": {"w": np.ones(2, np.float32)}}, None, 1, object())


def test_pending_refuses_double_launch_and_double_wait():
    class W:
        def wait(self):
            return 1

        def is_completed(self):
            return True
    p = Pending("all-gather", "u").launch(W())
    with pytest.raises(RuntimeError, match="launched twice"):
        p.launch(W())
    assert p.wait() == 1
    with pytest.raises(RuntimeError, match="never launched"):
        p.wait()


@pytest.mark.parametrize("stage", [2, 3])
def test_reduce_scatter_runs_while_the_trainer_computes(stage):
    """The gradient reduce-scatter handed over first completes while the
    trainer is still busy (here: 0.3 s of numpy work, which releases the GIL)."""
    def fn(comm):
        units = {f"u{i}": {"w": np.ones(200_000, np.float32)} for i in range(3)}
        opt = ZeroOptimizer(units, comm, stage, SGD(lr=0.1))
        opt.reduce_grads("u2", {"w": np.ones(200_000, np.float32)})
        pend = opt.units["u2"].pending[0]
        assert pend.launched
        t0, a = time.perf_counter(), np.ones((300, 300))
        while not pend.is_completed() and time.perf_counter() - t0 < 5:
            a = a @ a / 300.0  # the trainer's backward
        done_while_computing = pend.is_completed()
        for u in ("u1", "u0"):
            opt.reduce_grads(u, {"w": np.ones(200_000, np.float32)})
        opt.step()
        return done_while_computing
    assert all(simulate(2, fn))
    assert threading.active_count() < 50


def test_stage3_prefetches_forward_then_backward_and_frees():
    def fn(comm):
        units = {f"u{i}": {"w": np.full(10, float(i), np.float32)} for i in range(3)}
        opt = ZeroOptimizer(units, comm, 3, SGD(lr=0.1))
        seen = []
        for name in ["u0", "u1", "u2", "u2", "u1", "u0"]:  # forward, then backward
            with opt.gather(name) as p:
                np.testing.assert_array_equal(p["w"], np.full(10, float(name[1]), np.float32))
                seen.append(sorted(opt.gatherer.prefetched))
            assert name not in opt.gatherer.in_use
        opt.step()
        assert not opt.gatherer.prefetched and opt.memory_report()["comm"] == sum(
            b.nbytes for b in comm.scratch.values())
        return seen
    for seen in simulate(2, fn):
        assert seen == [["u1"], ["u2"], ["u2"], ["u1"], ["u0"], []]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("case,words", [
    ("transposed", ["unit 'layer0' differs", "rank 0: W (6, 20), b (20,)", "W (20, 6), b (20,)"]),
    ("stage", ["stage differs", "rank 0: 2", ": 3"]),
    ("names", ["unit names differ", "['layer0']", "['layer1']"]),
])
def test_ranks_with_different_models_fail_at_construction(world, case, words):
    """Collectives check sizes, not shapes: a transposed weight on one rank would
    shard and train silently. ZeroOptimizer compares the models up front and
    every rank says where they differ."""
    def fn(c):
        last = c.rank == c.size - 1
        shape = (20, 6) if case == "transposed" and last else (6, 20)
        name = "layer1" if case == "names" and last else "layer0"
        stage = 3 if case == "stage" and last else 2
        return ZeroOptimizer({name: {"W": np.ones(shape, np.float32), "b": np.zeros(20, np.float32)}},
                             c, stage, SGD(lr=0.1))

    got = simulate(world, fn, return_exceptions=True, timeout=10)
    for r, e in enumerate(got):
        assert isinstance(e, ValueError), (r, e)
        assert f"rank {r}: ZeroOptimizer: ranks passed different models" in str(e)
        for w in words:
            assert w in str(e), (w, str(e))
