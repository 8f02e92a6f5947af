"""A checkpoint on disk: names, checksums, durable writes, and reading shards back.

Layout of ``DIR``::

    DIR/LATEST                          name of the newest complete checkpoint (replaced atomically)
    DIR/step-00000012/meta.json         what was saved (model, stage, world size, optimizer, ...)
    DIR/step-00000012/meta.json.sha256  sha256 of meta.json (which holds every rank file's sha256)
    DIR/step-00000012/rank-00003.npz    master/<unit>, <state>/<unit>: the shard of rank 3

A save never writes into or removes a directory that LATEST may name: it
fills ``DIR/.tmp-<name>-<token>/`` and renames it to a name not yet used
(``step-00000012``, or ``step-00000012-2`` when that step was saved before).
No collectives here; the protocol between ranks is in checkpoint.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from .shard import ShardInfo, overlap, padded_numel

FORMAT_VERSION = 1
LATEST = "LATEST"
META = "meta.json"
META_SUM = "meta.json.sha256"
TMP_PREFIX = ".tmp-"


class CheckpointError(ValueError):
    """A checkpoint cannot be read: missing, corrupt, or of another format."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (files created, renamed into it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_leftovers(root: Path) -> list:
    """Remove the ``.tmp-*`` folders of saves that were killed; return their names."""
    gone = []
    for p in root.glob(TMP_PREFIX + "*"):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p.name)
    return gone


def checkpoint_name(step: int, k: int = 1) -> str:
    """The k-th checkpoint of a step: ``step-NNNNNNNN``, then ``step-NNNNNNNN-2``, ..."""
    return f"step-{step:08d}" + (f"-{k}" if k > 1 else "")


def fresh_k(root: Path, step: int) -> int:
    """The first k whose checkpoint_name(step, k) is not taken under ``root``."""
    k = 1
    while (root / checkpoint_name(step, k)).exists():
        k += 1
    return k


def write_meta(ckpt: Path, meta: dict) -> None:
    data = json.dumps(meta, indent=1).encode()
    fsync_write(ckpt / META, data)
    fsync_write(ckpt / META_SUM, hashlib.sha256(data).hexdigest().encode())


def publish(root: Path, tmp: Path, name: str) -> Path:
    """Rename the filled ``tmp`` to ``root/name`` and point LATEST at it, durably."""
    fsync_dir(tmp)  # the rank files' and meta.json's entries
    final = root / name
    os.rename(tmp, final)
    fsync_dir(root)
    fsync_write(root / (LATEST + ".tmp"), name.encode())
    os.replace(root / (LATEST + ".tmp"), root / LATEST)
    fsync_dir(root)
    return final


def resolve(directory) -> Path:
    """The checkpoint a directory means: itself if it has meta.json, else the one LATEST names."""
    d = Path(directory)
    if (d / META).exists():
        return d
    if not (d / LATEST).exists():
        raise CheckpointError(f"{d}: no checkpoint (neither {META} nor {LATEST})")
    ckpt = d / (d / LATEST).read_text().strip()
    if not (ckpt / META).exists():
        raise CheckpointError(f"{d / LATEST} names {ckpt.name}, which has no {META}")
    return ckpt


def read_meta(ckpt: Path) -> dict:
    """meta.json, verified against its checksum and format version."""
    data = (ckpt / META).read_bytes()
    try:
        want = (ckpt / META_SUM).read_text().strip()
    except FileNotFoundError:
        raise CheckpointError(f"{ckpt / META_SUM}: missing (checkpoint incomplete or of an older format)") from None
    if hashlib.sha256(data).hexdigest() != want:
        raise CheckpointError(f"{ckpt / META}: checksum mismatch (file corrupt)")
    meta = json.loads(data)
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{ckpt}: checkpoint format {meta.get('format_version')}, "
                              f"this code reads {FORMAT_VERSION}")
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
                if sha256_file(path) != want:
                    raise CheckpointError(f"{path}: checksum mismatch (file corrupt or from another save)")
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
