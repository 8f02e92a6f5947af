"""Sharded checkpoints, the protocol between ranks: each rank writes its
float32 master shard and optimizer-state shards, rank 0 writes the metadata
and publishes the checkpoint. Loads on any number of ranks and any stage
(resharding), since parameter offsets inside a unit's flat buffer do not
depend on the world size (see shard.py). The files and their layout are in
ckpt_files.py.

Every step that can fail on one rank (a mkdir, a write, a rename) is followed
by a collective that tells every rank whether any rank failed, so a failure
raises on every rank at once instead of leaving the others waiting for a
timeout. A process killed at any point leaves ``LATEST`` naming the previous
complete checkpoint; the next save removes what the killed one left behind.

Loading applies the checkpoint's optimizer settings (hyperparameters and
max_grad_norm) and allocates optimizer state to match them: a run resumes as
the saved run would have continued. Change settings after loading.
"""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from .ckpt_files import (FORMAT_VERSION, TMP_PREFIX, CheckpointError, ShardReader, checkpoint_name, consolidate,
                         fresh_k, publish, read_meta, remove_leftovers, resolve, sha256_file, write_meta)
from .optim import optimizer_from_hparams, steps_for
from .shard import ShardInfo

__all__ = ["save", "load", "consolidate", "resolve", "CheckpointError", "SaveError"]


class SaveError(RuntimeError):
    """A checkpoint save failed on at least one rank (raised on every rank)."""


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _model(opt) -> list:
    return [{"name": n, "params": [{"name": s.name, "shape": list(s.shape), "offset": s.offset}
                                   for s in u.layout.slots], "numel": u.layout.numel}
            for n, u in opt.units.items()]


def _owned(opt, u, a) -> np.ndarray:
    """This rank's shard of a float32 array (full where the stage keeps state full, else already the shard)."""
    return _host(a if opt.policy.shard_state else a[u.shard.slice()])


def _agree(comm, failed: list, error, what: str) -> None:
    """Raise on every rank if any rank failed (``failed``: the ranks that did)."""
    if error is not None:
        raise SaveError(f"rank {comm.rank}: {what}: {type(error).__name__}: {error}") from error
    if failed:
        ranks = f"rank {failed[0]}" if len(failed) == 1 else f"ranks {', '.join(map(str, failed))}"
        raise SaveError(f"rank {comm.rank}: {what}: failed on {ranks} (see the error there)")


def _meta(opt, digests: bytes) -> dict:
    comm = opt.comm
    return {
        "format_version": FORMAT_VERSION, "world_size": comm.size, "stage": opt.stage,
        "step": opt.step_count, "units": _model(opt),
        "param_dtype": opt.param_dtype.name, "master_dtype": "float32",
        "shard_sizes": {n: u.shard.size for n, u in opt.units.items()},
        "optimizer": opt.optimizer.hparams(), "state_names": list(opt.optimizer.state_names()),
        "loss_scaler": vars(opt.scaler) if opt.scaler is not None else None,
        "max_grad_norm": opt.max_grad_norm,
        "sha256": {f"rank-{r:05d}.npz": digests[32 * r:32 * (r + 1)].hex() for r in range(comm.size)},
    }


def _tmp(root: Path, opt, msg) -> Path:
    """The folder a save fills before it is published (token: msg[1:])."""
    return root / f"{TMP_PREFIX}{checkpoint_name(opt.step_count)}-{bytes(msg[1:]).hex()[:12]}"


def save(opt, directory, *, hook=None) -> str:
    """Write a checkpoint of ``opt`` under ``directory`` (collective: every rank calls it).

    Args:
      opt: the ZeroOptimizer.
      directory: the checkpoint root (created if missing); LATEST in it names the new checkpoint.
      hook: test hook, called with each file path after it is written; an
        exception from it counts as a failed write.
    Returns the new checkpoint's directory. Raises SaveError on every rank if any rank failed.
    """
    comm, root = opt.comm, Path(directory)
    what = f"saving step {opt.step_count} under {root}"
    opt.drop_prefetches()
    # 1. rank 0 makes the folder (and clears what killed saves left); everyone learns the token
    msg, error = np.zeros(3, np.int64), None  # [failed, token, token]: collectives move int64, not bytes
    if comm.rank == 0:
        try:
            root.mkdir(parents=True, exist_ok=True)
            remove_leftovers(root)
            msg[1:] = np.frombuffer(uuid.uuid4().bytes, np.int64)
            _tmp(root, opt, msg).mkdir()
        except Exception as e:  # any failure here must reach the other ranks, whatever its type
            msg[0], error = 1, e
    comm.broadcast(msg, root=0, out=msg)
    _agree(comm, [0] if msg[0] else [], error, what)
    tmp = _tmp(root, opt, msg)
    # 2. every rank writes its shard; everyone learns every rank's sha256 (or failure)
    mine = np.zeros(5, np.int64)  # [failed, sha256 as 4 words]
    try:
        arrays = {}
        for uname, u in opt.units.items():
            arrays[f"master/{uname}"] = _owned(opt, u, u.master)
            for sname, s in u.state.items():
                arrays[f"{sname}/{uname}"] = _owned(opt, u, s)
        rank_file = tmp / f"rank-{comm.rank:05d}.npz"
        with open(rank_file, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        if hook is not None:
            hook(rank_file)
        mine[1:] = np.frombuffer(bytes.fromhex(sha256_file(rank_file)), np.int64)
    except Exception as e:  # any failure here must reach the other ranks, whatever its type
        mine[0], error = 1, e
    every = comm.all_gather(mine).reshape(comm.size, 5)
    failed = [q for q in range(comm.size) if every[q, 0]]
    if failed and comm.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    _agree(comm, failed, error, what)
    # 3. rank 0 writes meta.json and publishes under a fresh name; everyone learns the name
    done = np.zeros(2, np.int64)  # [failed, k of checkpoint_name]
    if comm.rank == 0:
        try:
            write_meta(tmp, _meta(opt, every[:, 1:].tobytes()))
            if hook is not None:
                hook(tmp / "meta.json")
            done[1] = fresh_k(root, opt.step_count)
            publish(root, tmp, checkpoint_name(opt.step_count, int(done[1])))
        except Exception as e:  # as above
            done[0], error = 1, e
            shutil.rmtree(tmp, ignore_errors=True)
    comm.broadcast(done, root=0, out=done)
    _agree(comm, [0] if done[0] else [], error, what)
    return str(root / checkpoint_name(opt.step_count, int(done[1])))


def check_same_model(opt, meta: dict, where) -> None:
    ours, theirs = _model(opt), meta["units"]
    if ours == theirs:
        return
    mine = {(u["name"], p["name"]): p["shape"] for u in ours for p in u["params"]}
    other = {(u["name"], p["name"]): p["shape"] for u in theirs for p in u["params"]}
    diffs = [f"{u}.{p}: checkpoint has {other.get((u, p), 'nothing')}, model has {mine.get((u, p), 'nothing')}"
             for (u, p) in sorted(set(mine) | set(other)) if mine.get((u, p)) != other.get((u, p))]
    raise ValueError(f"{where} is a checkpoint of a different model: "
                     + ("; ".join(diffs[:5]) if diffs else "same parameters in a different order"))


def load(opt, directory) -> None:
    """Load into ``opt`` (collective); any saved world size and stage.

    The checkpoint's optimizer settings and max_grad_norm replace ``opt``'s,
    and its optimizer state is allocated to match. Raises ValueError on every
    rank if any rank cannot read the checkpoint.
    """
    loaded, error, ckpt = {}, None, Path(directory)
    # read everything first, without collectives, then agree: a rank that
    # fails (bad checksum, missing file) makes every rank raise instead of hanging
    try:
        ckpt = resolve(directory)
        meta = read_meta(ckpt)
        check_same_model(opt, meta, ckpt)
        if meta["optimizer"]["name"] != opt.optimizer.name:
            raise ValueError(f"{ckpt}: saved with optimizer {meta['optimizer']['name']!r}, this run uses "
                             f"{opt.optimizer.name!r}")
        optimizer = optimizer_from_hparams(meta["optimizer"])
        reader = ShardReader(ckpt, meta)
        opt.drop_prefetches()
        for uname, u in opt.units.items():
            want = u.shard if opt.policy.shard_state else ShardInfo(0, u.layout.padded)
            loaded[uname] = {key: reader.read(key, uname, want)
                             for key in ["master"] + [n for n in optimizer.state_names() if n in meta["state_names"]]}
    except (OSError, ValueError, KeyError) as e:
        error = e
    failed = opt.comm.all_reduce(np.array([error is not None], np.int32), op="max")[0]
    if error is not None:
        raise ValueError(f"rank {opt.comm.rank}: cannot load {ckpt}: {error}") from error
    if failed:
        raise ValueError(f"rank {opt.comm.rank}: another rank could not load {ckpt} (see its error)")
    xp = opt.xp
    opt.optimizer, opt.max_grad_norm = optimizer, meta.get("max_grad_norm")
    for uname, u in opt.units.items():
        u.master[...] = xp.asarray(loaded[uname]["master"])
        u.state = {n: xp.asarray(loaded[uname][n]) if n in loaded[uname] else xp.zeros_like(u.master)
                   for n in optimizer.state_names()}
        if u.pshard is not u.master:
            steps_for(u.master).cast(u.pshard, u.master)
        if opt.policy.gather_after_step:
            opt.comm.all_gather(u.pshard, out=u.full)
        u.grad[...] = 0
    opt.step_count = int(meta["step"])
    if opt.scaler is not None and meta.get("loss_scaler"):
        for key, v in meta["loss_scaler"].items():
            setattr(opt.scaler, key, v)
    opt.comm.barrier()
