"""Every threshold, chunk size and switch of the library, with where it was measured.

``load()`` reads them once per Communicator: the defaults (settings.py, the table), then the file
``bench/tune.py`` writes (``RINGZERO_TUNING``, else ``~/.config/ringzero/tuning.json``
when it exists), then each setting's environment variable. Nothing else in the
library reads the environment or keeps a threshold of its own.

    python -m collectives.tuning        # every setting, its value now and its source
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..dtypes import DATA_COLLECTIVES
from .settings import SETTINGS, KiB, MiB, Setting  # noqa: F401  (the table; Setting and the units for users)

BY_NAME = {s.name: s for s in SETTINGS}


class Tuning:
    """The settings' values, as attributes (``tuning.pipe_chunk_bytes``), and where each came from."""

    def __init__(self, values: dict, origins: dict):
        self.__dict__.update(values)
        self._origins = origins

    def origin(self, name: str) -> str:
        """"default", the tuning file's path, or the environment variable that set ``name``."""
        return self._origins[name]

    def stage_max(self) -> dict:
        """Per collective, the largest staged call (auto staging)."""
        return {k: getattr(self, "stage_max_" + k) for k in DATA_COLLECTIVES}

    def pipe_min(self) -> dict:
        return {"all_reduce": self.pipe_min_all_reduce, "all_gather": self.pipe_min_all_gather}


def _parse(s: Setting, text: str):
    if isinstance(s.default, str):
        return text
    try:
        return type(s.default)(float(text)) if isinstance(s.default, int) else float(text)
    except ValueError:
        raise ValueError(f"{s.env}={text!r}: {s.name} must be a number ({s.doc})") from None


def tuning_file(environ=None) -> Path | None:
    """The tuning file to read: ``RINGZERO_TUNING``, else ``~/.config/ringzero/tuning.json`` if it exists."""
    env = os.environ if environ is None else environ
    given = env.get("RINGZERO_TUNING")
    if given:
        return Path(given)
    home = Path(env.get("HOME", "~")).expanduser() / ".config" / "ringzero" / "tuning.json"
    return home if home.exists() else None


_FILES: dict = {}  # (path, mtime) -> its values: a Communicator per call reads no file twice


def _read(path: Path) -> dict:
    key = (str(path), path.stat().st_mtime_ns)
    got = _FILES.get(key)
    if got is None:
        data = json.loads(path.read_text())
        values = data.get("values", data)
        unknown = sorted(set(values) - set(BY_NAME))
        if unknown:
            raise ValueError(f"tuning file {path}: unknown settings {unknown}; known: {', '.join(BY_NAME)}")
        got = _FILES[key] = {k: type(BY_NAME[k].default)(v) for k, v in values.items()}
    return got


def load(environ=None, **overrides) -> Tuning:
    """The settings now: defaults, the tuning file, the environment, then ``overrides`` (keyword: value)."""
    env = os.environ if environ is None else environ
    values = {s.name: s.default for s in SETTINGS}
    origins = dict.fromkeys(values, "default")
    path = tuning_file(env)
    if path is not None:
        try:
            values.update(_read(path))
        except OSError as e:
            raise ValueError(f"RINGZERO_TUNING: cannot read {path}: {e}") from None
        origins.update(dict.fromkeys(_read(path), str(path)))
    for s in SETTINGS:
        text = env.get(s.env, "") if s.env else ""
        if text != "":
            values[s.name] = _parse(s, text)
            origins[s.name] = s.env
    for k, v in overrides.items():
        if k not in BY_NAME:
            raise TypeError(f"unknown setting {k!r}")
        values[k], origins[k] = v, "argument"
    return Tuning(values, origins)


def defaults() -> Tuning:
    """The built-in values alone (no file, no environment): for objects made outside a Communicator."""
    return Tuning({s.name: s.default for s in SETTINGS}, dict.fromkeys(BY_NAME, "default"))


# What launchers set in each process's environment, which bootstrap/choose.py reads to tell how
# the processes were started: Open MPI (mpirun, prterun), MPICH's and Intel MPI's Hydra (PMI),
# Slurm with PMIx (srun --mpi=pmix), torchrun (TORCHELASTIC_*) and torch's env:// rendezvous.
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS", "TORCHELASTIC_RUN_ID",
                 "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")


def launcher(environ=None) -> dict[str, str]:
    """The launcher variables (LAUNCHER_VARS) set in the environment, by name."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in LAUNCHER_VARS if env.get(k, "") != ""}


def main() -> None:
    t = load()
    for s in SETTINGS:
        env = f" [{s.env}]" if s.env else ""
        print(f"{s.name} = {getattr(t, s.name)!r} ({t.origin(s.name)}){env}\n    {s.doc}\n    measured: {s.source}")
