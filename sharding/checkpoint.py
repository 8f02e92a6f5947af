"""Sharded checkpoints: each rank writes its float32 master shard and
optimizer-state shards; rank 0 writes the metadata. Loads on any number of
ranks and any stage (resharding), since parameter offsets inside a unit's
flat buffer do not depend on the world size (see shard.py).

Layout of ``DIR``::

    DIR/LATEST                 name of the newest complete checkpoint (replaced atomically)
    DIR/step-00000012/meta.json
    DIR/step-00000012/rank-00003.npz   (master/<unit>, <state>/<unit>; shard of rank 3)

Atomicity: every rank writes into ``DIR/.tmp-step-N-<token>/``; after a
barrier rank 0 writes meta.json (with each rank file's sha256), renames the
directory to ``step-N`` and only then replaces ``LATEST``. A process killed
at any point leaves ``LATEST`` naming the previous, complete checkpoint.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from .optim import optimizer_from_hparams
from .shard import ShardInfo, overlap, padded_numel

FORMAT_VERSION = 1
LATEST = "LATEST"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _model(opt) -> list:
    return [{"name": n, "params": [{"name": s.name, "shape": list(s.shape), "offset": s.offset}
                                   for s in u.layout.slots], "numel": u.layout.numel}
            for n, u in opt.units.items()]


def _owned(opt, u, a) -> np.ndarray:
    """This rank's shard of a float32 array (full at stage 0, already the shard otherwise)."""
    return _host(a[u.shard.slice()] if opt.stage == 0 else a)


def save(opt, directory, *, hook=None) -> str:
    """Write a checkpoint of ``opt`` under ``directory`` (collective: every rank calls it).

    Args:
      hook: test hook, called with each file path after it is written.
    Returns the checkpoint's directory.
    """
    comm, root = opt.comm, Path(directory)
    opt._drop_prefetches()
    token = np.zeros(2, np.int64)  # the collectives move int64, not bytes
    if comm.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        token[:] = np.frombuffer(uuid.uuid4().bytes, np.int64)
    comm.broadcast(token, root=0, out=token)
    name = f"step-{opt.step_count:08d}"
    tmp = root / f".tmp-{name}-{bytes(token).hex()[:12]}"
    if comm.rank == 0:
        tmp.mkdir(parents=True)
    comm.barrier()
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
    digest = np.frombuffer(bytes.fromhex(_sha256(rank_file)), np.int64).copy()
    digests = comm.all_gather(digest).tobytes()  # every rank's sha256, in rank order
    if comm.rank == 0:
        meta = {
            "format_version": FORMAT_VERSION, "world_size": comm.size, "stage": opt.stage,
            "step": opt.step_count, "units": _model(opt),
            "param_dtype": opt.param_dtype.name, "master_dtype": "float32",
            "shard_sizes": {n: u.shard.size for n, u in opt.units.items()},
            "optimizer": opt.optimizer.hparams(), "state_names": list(opt.optimizer.state_names()),
            "loss_scaler": vars(opt.scaler) if opt.scaler is not None else None,
            "max_grad_norm": opt.max_grad_norm,
            "sha256": {f"rank-{r:05d}.npz": digests[32 * r:32 * (r + 1)].hex() for r in range(comm.size)},
        }
        _fsync_write(tmp / "meta.json", json.dumps(meta, indent=1).encode())
        if hook is not None:
            hook(tmp / "meta.json")
        final = root / name
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_write(root / (LATEST + ".tmp"), name.encode())
        os.replace(root / (LATEST + ".tmp"), root / LATEST)
        dfd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    comm.barrier()
    return str(root / name)


def resolve(directory) -> Path:
    """The checkpoint a directory means: itself if it has meta.json, else the one LATEST names."""
    d = Path(directory)
    if (d / "meta.json").exists():
        return d
    if not (d / LATEST).exists():
        raise FileNotFoundError(f"{d}: no checkpoint (neither meta.json nor {LATEST})")
    return d / (d / LATEST).read_text().strip()


def read_meta(ckpt: Path) -> dict:
    meta = json.loads((ckpt / "meta.json").read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{ckpt}: checkpoint format {meta.get('format_version')}, this code reads {FORMAT_VERSION}")
    return meta


class ShardReader:
    """Reads ranges of a unit's logical flat float32 arrays from a checkpoint's rank files."""

    def __init__(self, ckpt: Path, meta: dict, verify: bool = True):
        self.ckpt, self.meta, self._files = ckpt, meta, {}
        self.verify = verify

    def _file(self, r: int):
        if r not in self._files:
            path = self.ckpt / f"rank-{r:05d}.npz"
            if self.verify:
                want = self.meta["sha256"][path.name]
                if _sha256(path) != want:
                    raise ValueError(f"{path}: checksum mismatch (file corrupt or from another save)")
            self._files[r] = np.load(path)
        return self._files[r]

    def read(self, key: str, unit: str, want: ShardInfo) -> np.ndarray:
        """Elements [want.offset, want.end) of the flat array ``key`` of ``unit`` (zeros past the end)."""
        out = np.zeros(want.size, np.float32)
        size = self.meta["shard_sizes"][unit]
        for r in range(self.meta["world_size"]):
            o = overlap(want, ShardInfo(r * size, size))
            if o is not None:
                src = self._file(r)[f"{key}/{unit}"]
                out[o.offset - want.offset:o.end - want.offset] = src[o.offset - r * size:o.end - r * size]
        return out


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
    """Load into ``opt`` (collective); any saved world size and stage."""
    ckpt = resolve(directory)
    meta = read_meta(ckpt)
    check_same_model(opt, meta, ckpt)
    if meta["optimizer"]["name"] != opt.optimizer.name:
        raise ValueError(f"{ckpt}: saved with optimizer {meta['optimizer']['name']!r}, this run uses "
                         f"{opt.optimizer.name!r}")
    opt._drop_prefetches()
    opt.optimizer = optimizer_from_hparams(meta["optimizer"])
    reader = ShardReader(ckpt, meta)
    # read everything first, without collectives, then agree: a rank that
    # fails (bad checksum, missing file) makes every rank raise instead of hanging
    loaded, error = {}, None
    try:
        for uname, u in opt.units.items():
            want = ShardInfo(0, u.layout.padded) if opt.stage == 0 else u.shard
            loaded[uname] = {key: reader.read(key, uname, want)
                             for key in ["master"] + [n for n in u.state if n in meta["state_names"]]}
    except (OSError, ValueError, KeyError) as e:
        error = e
    failed = opt.comm.all_reduce(np.array([error is not None], np.int32), op="max")[0]
    if error is not None:
        raise ValueError(f"rank {opt.comm.rank}: cannot load {ckpt}: {error}") from error
    if failed:
        raise ValueError(f"rank {opt.comm.rank}: another rank could not load {ckpt} (see its error)")
    xp, k = opt.xp, opt.k
    for uname, u in opt.units.items():
        u.master[...] = xp.asarray(loaded[uname]["master"])
        for sname, s in u.state.items():
            s[...] = xp.asarray(loaded[uname][sname]) if sname in loaded[uname] else 0
        if u.pshard is not u.master:
            k.cast(u.pshard, u.master)
        if opt.stage in (1, 2):
            opt.comm.all_gather(u.pshard, out=u.full)
        u.grad[...] = 0
    opt.step_count = int(meta["step"])
    if opt.scaler is not None and meta.get("loss_scaler"):
        for key, v in meta["loss_scaler"].items():
            setattr(opt.scaler, key, v)
    opt.comm.barrier()


def consolidate(directory) -> dict:
    """Full float32 weights ``{"unit/name": array}`` from a checkpoint, without any ranks."""
    ckpt = resolve(directory)
    meta = read_meta(ckpt)
    reader = ShardReader(ckpt, meta)
    out = {}
    for u in meta["units"]:
        flat = reader.read("master", u["name"], ShardInfo(0, padded_numel(u["numel"], 1)))
        for p in u["params"]:
            n = int(np.prod(p["shape"], dtype=np.int64))
            out[f"{u['name']}/{p['name']}"] = flat[p["offset"]:p["offset"] + n].reshape(p["shape"])
    return out
