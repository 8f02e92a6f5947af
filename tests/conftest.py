"""Shared test helpers: launching real mpirun jobs from pytest."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MPI_SCRIPTS = Path(__file__).resolve().parent / "mpi"


def mpirun_cmd(n: int) -> list[str]:
    """mpirun from the same virtualenv as this Python, allowed as root, oversubscribed."""
    mpirun = Path(sys.executable).parent / "mpirun"
    return [str(mpirun) if mpirun.exists() else "mpirun", "--oversubscribe", "-n", str(n)]


def mpi_env() -> dict:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_osc=env.get("OMPI_MCA_osc", "^ucx"), PYTHONUNBUFFERED="1",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def run_mpi(n: int, script: str | Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``python script args`` on n ranks; return the finished process (never hangs)."""
    path = Path(script)
    if not path.is_absolute():
        path = MPI_SCRIPTS / path
    cmd = mpirun_cmd(n) + [sys.executable, str(path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env(), cwd=ROOT)


@pytest.fixture
def mpi():
    return run_mpi
