"""Checkpoints under failure: a repeated save interrupted before it publishes,
leftovers of killed saves, a corrupt meta.json, a rank that cannot write
(every rank raises at once), and the consolidate tool on a broken checkpoint."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from collectives import CollectiveError, simulate
from sharding import AdamW, ZeroOptimizer
from sharding.checkpoint import consolidate, resolve

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from model import forward_backward, init_units, make_data  # noqa: E402

SIZES = [6, 20, 5]
X, Y = make_data(8, 6, 5)


def _trained(comm, steps=1):
    opt = ZeroOptimizer(init_units(SIZES), comm, 3, AdamW(lr=1e-2))
    n = 8 // comm.size
    for _ in range(steps):
        forward_backward(opt.gather, opt.reduce_grads, list(opt.units), X[comm.rank * n:(comm.rank + 1) * n],
                         Y[comm.rank * n:(comm.rank + 1) * n])
        opt.step()
    return opt


def _flat(params):
    return {f"{u}/{k}": v for u, d in params.items() for k, v in d.items()}


def test_repeated_save_interrupted_before_publishing_keeps_the_checkpoint(tmp_path, monkeypatch):
    """The same step saved twice (a double save, a skipped fp16 step), the second
    killed where it moves its folder into place: LATEST still names a complete checkpoint."""
    renames, real_rename = [], os.rename

    def rename(src, dst):
        renames.append(dst)
        if len(renames) == 2:
            raise KeyboardInterrupt("killed")  # what a kill leaves: nothing after this line runs
        return real_rename(src, dst)
    monkeypatch.setattr(os, "rename", rename)

    def fn(comm):
        opt = _trained(comm)
        first = opt.save_checkpoint(tmp_path)
        full = opt.full_params()
        try:
            opt.save_checkpoint(tmp_path)
        except BaseException:
            pass
        return first, full
    (first, full), _ = simulate(2, fn, timeout=2)  # rank 1 waits out the killed rank 0's broadcast
    assert len(renames) == 2
    assert resolve(tmp_path) == Path(first)
    got = consolidate(tmp_path)
    for key, v in _flat(full).items():
        np.testing.assert_array_equal(got[key], v)


def test_each_save_gets_a_fresh_folder_and_clears_leftovers(tmp_path):
    junk = tmp_path / ".tmp-step-00000009-0123456789ab"
    junk.mkdir(parents=True)
    (junk / "rank-00000.npz").write_bytes(b"half a file")

    def fn(comm):
        opt = _trained(comm)
        return opt.save_checkpoint(tmp_path), opt.save_checkpoint(tmp_path), opt.full_params()
    a, b, full = simulate(2, fn)[0]
    assert a != b and Path(a).name == "step-00000001" and Path(b).name == "step-00000001-2"
    assert resolve(tmp_path) == Path(b) and (Path(a) / "meta.json").exists()
    assert not list(tmp_path.glob(".tmp-*"))
    for ckpt in (a, b):
        got = consolidate(ckpt)
        for key, v in _flat(full).items():
            np.testing.assert_array_equal(got[key], v)


def test_meta_json_is_checksummed(tmp_path):
    simulate(1, lambda comm: _trained(comm).save_checkpoint(tmp_path))
    meta = resolve(tmp_path) / "meta.json"
    meta.write_text(meta.read_text().replace('"step": 1', '"step": 7'))
    with pytest.raises(ValueError, match="meta.json: checksum mismatch"):
        consolidate(tmp_path)


@pytest.mark.parametrize("where", ["rank 1 write", "rank 0 mkdir"])
def test_a_failed_save_raises_on_every_rank_at_once(tmp_path, where):
    root = tmp_path / "ckpt"
    if where == "rank 0 mkdir":
        root.write_text("a file where the folder should be")

    def hook(path):
        raise OSError(28, "No space left on device", str(path))

    def fn(comm):
        opt = _trained(comm)
        opt.save_checkpoint(root, hook=hook if comm.rank == 1 and where == "rank 1 write" else None)
    t0 = time.monotonic()
    errors = simulate(2, fn, timeout=5, return_exceptions=True)
    elapsed = time.monotonic() - t0
    failed = "1" if where == "rank 1 write" else "0"
    for e in errors:
        assert isinstance(e, RuntimeError) and not isinstance(e, CollectiveError), repr(e)
        assert f"rank {failed}" in str(e) or "Errno" in str(e), str(e)
    assert elapsed < 4, f"ranks waited {elapsed:.1f} s for a peer that had already failed"
    if where == "rank 1 write":
        assert not list(root.glob(".tmp-*")) and not (root / "LATEST").exists()


def test_consolidate_tool_says_one_line_on_a_corrupt_checkpoint(tmp_path):
    simulate(1, lambda comm: _trained(comm).save_checkpoint(tmp_path))
    f = resolve(tmp_path) / "rank-00000.npz"
    data = bytearray(f.read_bytes())
    data[-100] ^= 0xFF
    f.write_bytes(bytes(data))
    for args in ([str(tmp_path), str(tmp_path / "out.npz")], [str(tmp_path / "nothing"), "x.npz"]):
        p = subprocess.run([sys.executable, "-m", "sharding.consolidate", *args], capture_output=True, text=True,
                           cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert p.returncode != 0
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
        assert lines[0].startswith("consolidate: ") and args[0] in lines[0], lines


def test_a_rank_that_finds_no_checkpoint_fails_every_rank_at_once(tmp_path):
    """Rank 1 sees no checkpoint where rank 0 sees one (a node-local path):
    both raise at once instead of rank 0 waiting for rank 1."""
    simulate(2, lambda comm: _trained(comm).save_checkpoint(tmp_path / "ckpt"))

    def fn(comm):
        opt = ZeroOptimizer(init_units(SIZES), comm, 3, AdamW(lr=1e-2))
        opt.load_checkpoint(tmp_path / ("ckpt" if comm.rank == 0 else "elsewhere"))
    t0 = time.monotonic()
    errors = simulate(2, fn, timeout=5, return_exceptions=True)
    assert time.monotonic() - t0 < 4
    assert isinstance(errors[0], ValueError) and "another rank could not load" in str(errors[0]), repr(errors[0])
    assert isinstance(errors[1], ValueError) and "no checkpoint" in str(errors[1]), repr(errors[1])


def test_publishing_fsyncs_the_new_folder_before_the_rename_and_the_root_after(tmp_path, monkeypatch):
    import sharding.ckpt_files as files
    synced, real = [], files.fsync_dir
    monkeypatch.setattr(files, "fsync_dir", lambda p: (synced.append(Path(p)), real(p)))
    path = simulate(1, lambda comm: _trained(comm).save_checkpoint(tmp_path))[0]
    assert synced[0].name.startswith(".tmp-step-00000001-") and synced[0].parent == tmp_path
    assert synced[1:] == [tmp_path, tmp_path] and resolve(tmp_path) == Path(path)
