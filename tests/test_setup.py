"""Setup never hangs and never fails alone: agreed outcomes over the bootstrap, and a
node whose shared memory is short (a 64 MiB tmpfs over /dev/shm, in a mount namespace)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                       capture_output=True, text=True)
    return p.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m to mount a small /dev/shm")
def test_a_short_dev_shm_raises_on_every_rank_and_zero_falls_back():
    mpirun = " ".join(mpirun_cmd(2))
    cmd = f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {mpirun} {sys.executable} {MPI_SCRIPTS / 'shm_short.py'}"
    p = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=300,
                       env=mpi_env(), cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = p.stdout.splitlines()
    for r in range(2):
        err = [ln for ln in lines if ln.startswith(f"rank {r}: SharedMemoryError")]
        assert len(err) == 1, p.stdout
        m = re.match(rf"rank {r}: SharedMemoryError after ([\d.]+) s: (.*)", err[0])
        assert float(m.group(1)) < 10, err[0]  # within seconds, not at a 180 s outside timeout
        why = m.group(2)
        assert "heap window" in why and "do not fit" in why and "bytes free" in why, why
        assert "--shm-size" in why and "symmetric=False" in why, why  # the way out
        assert f"rank {r}: after: exact=True leftover=0" in lines, p.stdout
        zero = [ln for ln in lines if ln.startswith(f"rank {r}: zero:")]
        assert zero and "symmetric=False warnings=1 same_as_ordinary=True" in zero[0], p.stdout
        assert "shared memory is short" in zero[0], zero[0]


def test_a_setup_step_that_fails_on_one_rank_fails_on_every_rank(mpi):
    r = mpi(3, "setup_agree.py", timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for q in range(3):
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"rank {q}:"))
        assert "SetupError" in line and "failed on rank(s) [1] of 3" in line and "rank 1: no luck" in line, line
        assert "timed out" in r.stdout and "setup step 'barrier'" in r.stdout, r.stdout
