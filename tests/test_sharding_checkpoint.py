"""Sharded checkpoints: resharding across world sizes and stages, checksums,
model mismatch, consolidation, and a save killed half-way."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sharding import AdamW, SGD, ZeroOptimizer
from sharding.checkpoint import consolidate, resolve
from collectives import simulate

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's code, not an installed copy
sys.path.insert(0, str(ROOT / "examples"))
from model import forward_backward, init_units, make_data  # noqa: E402

SIZES = [6, 20, 13, 5]
NAMES = [f"layer{i}" for i in range(3)]
BATCH = 24
X, Y = make_data(BATCH, 6, 5)
OPTS = {"adamw": lambda: AdamW(lr=1e-2), "sgd": lambda: SGD(lr=0.1, momentum=0.9),
        "sgd0": lambda: SGD(lr=0.3)}


def run(world, stage, steps, *, opt_name="adamw", load=None, save=None, **kw):
    def fn(comm):
        opt = ZeroOptimizer(init_units(SIZES), comm, stage, OPTS[opt_name](), **kw)
        if load is not None:
            opt.load_checkpoint(load)
        n = BATCH // world
        for _ in range(steps):
            forward_backward(opt.gather, opt.reduce_grads, NAMES, X[comm.rank * n:(comm.rank + 1) * n],
                             Y[comm.rank * n:(comm.rank + 1) * n], loss_scale=opt.loss_scale)
            opt.step()
        if save is not None:
            opt.save_checkpoint(save)
        return opt.full_params(), opt.step_count, (opt.optimizer, opt.max_grad_norm)
    return simulate(world, fn)


def close(a, b, rtol=1e-6, atol=1e-7):
    for u in a:
        for k in a[u]:
            np.testing.assert_allclose(a[u][k], b[u][k], rtol=rtol, atol=atol, err_msg=f"{u}.{k}")


@pytest.mark.parametrize("opt_name", ["adamw", "sgd"])
def test_saved_at_4_ranks_stage_3_continues_anywhere(tmp_path, opt_name):
    whole = run(1, 0, 5, opt_name=opt_name)[0][0]
    run(4, 3, 3, opt_name=opt_name, save=tmp_path)
    for world, stage in [(2, 1), (1, 0), (3, 2), (4, 3)]:
        for params, step, _ in run(world, stage, 2, opt_name=opt_name, load=tmp_path):
            assert step == 5
            close(params, whole)


def test_consolidate_writes_full_float32_weights(tmp_path):
    params = run(3, 2, 2, save=tmp_path)[0][0]
    full = consolidate(tmp_path)
    assert set(full) == {f"{u}/{k}" for u in params for k in params[u]}
    for u in params:
        for k in params[u]:
            np.testing.assert_array_equal(full[f"{u}/{k}"], params[u][k])
    out = tmp_path / "w.npz"
    subprocess.run([sys.executable, "-m", "sharding.consolidate", str(tmp_path), str(out)], check=True,
                   capture_output=True, cwd=ROOT, env=ENV)
    with np.load(out) as z:
        np.testing.assert_array_equal(z["layer1/W"], params["layer1"]["W"])


def test_metadata_and_refusals(tmp_path):
    run(2, 1, 1, save=tmp_path)
    ckpt = resolve(tmp_path)
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["format_version"] == 1 and meta["world_size"] == 2 and meta["stage"] == 1 and meta["step"] == 1
    assert meta["optimizer"]["name"] == "adamw" and [u["name"] for u in meta["units"]] == NAMES
    assert sorted(meta["sha256"]) == ["rank-00000.npz", "rank-00001.npz"]

    def other_model(comm):
        opt = ZeroOptimizer(init_units([6, 21, 13, 5]), comm, 1, AdamW())
        opt.load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match=r"different model: layer0.W: checkpoint has \[6, 20\], model has \[6, 21\]"):
        simulate(1, other_model)

    def wrong_optimizer(comm):
        ZeroOptimizer(init_units(SIZES), comm, 1, SGD()).load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="optimizer"):
        simulate(1, wrong_optimizer)

    f = ckpt / "rank-00001.npz"
    data = bytearray(f.read_bytes())
    data[-100] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum|another rank"):
        run(2, 1, 0, load=tmp_path)


def test_save_killed_midway_leaves_previous_checkpoint_loadable(tmp_path):
    script = Path(__file__).resolve().parent / "mpi" / "zero_ckpt_kill.py"
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True,
                         cwd=ROOT, env=ENV)
    lines, deadline = [], time.time() + 60
    try:
        while time.time() < deadline:
            line = p.stdout.readline()
            lines.append(line)
            if line.startswith("WRITING") or not line:
                break
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert any(x.startswith("SAVED") for x in lines) and lines[-1].startswith("WRITING"), lines
    assert list((tmp_path / "ckpt").glob(".tmp-step-00000002-*"))  # the killed save had begun
    full = consolidate(tmp_path / "ckpt")  # LATEST still names step 1, complete and verified
    assert resolve(tmp_path / "ckpt").name == "step-00000001"
    with np.load(tmp_path / "saved.npz") as saved:
        for key in saved.files:
            np.testing.assert_array_equal(full[key], saved[key])


@pytest.mark.parametrize("stage", [0, 3])
def test_the_checkpoints_optimizer_settings_win(tmp_path, stage):
    """Saved with SGD momentum 0.9 and clipping at 0.5; loaded into SGD without
    momentum or clipping: the run continues as the saved one would have (state
    allocated to match, max_grad_norm restored), and the reverse drops the buffer."""
    whole = run(2, stage, 4, opt_name="sgd", max_grad_norm=0.5)[0][0]
    run(2, stage, 2, opt_name="sgd", max_grad_norm=0.5, save=tmp_path / "a")
    for params, step, (optimizer, clip) in run(2, stage, 2, opt_name="sgd0", load=tmp_path / "a"):
        assert step == 4 and optimizer == OPTS["sgd"]() and clip == 0.5
        close(params, whole)
    whole0 = run(1, stage, 3, opt_name="sgd0")[0][0]
    run(1, stage, 1, opt_name="sgd0", save=tmp_path / "b")
    for params, step, (optimizer, clip) in run(1, stage, 2, opt_name="sgd", max_grad_norm=0.5, load=tmp_path / "b"):
        assert step == 3 and optimizer == OPTS["sgd0"]() and clip is None
        close(params, whole0)
