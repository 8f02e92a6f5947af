"""The GPU scripts' own logic, run here on the host stand-in for cupy (bench/cupy_on_host).

The stand-in keeps device memory in host memory and runs the csrc/ kernels
compiled by g++ (bench/kernels_on_host.py), so what bench/gpu_check.sh runs on
a lent GPU runs here first: the GPU kernel tests, the review-defect checks and
the collectives on "device" arrays under mpirun through the staged transport.
A bug in those scripts would otherwise surface only in the one GPU run.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import mpi_env, mpirun_cmd

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = ROOT / "bench" / "cupy_on_host"
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the stand-in compiles the kernels with g++")


def _env():
    env = mpi_env()
    env["PYTHONPATH"] = os.pathsep.join([str(STAND_IN), str(ROOT), env.get("PYTHONPATH", "")])
    env["RZ_REQUIRE_GPU"] = "1"
    return env


def test_gpu_kernel_tests_and_defect_checks_on_the_stand_in(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda_kernels.py"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env())
    assert r.returncode == 0 and " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-3000:]
    r = subprocess.run([sys.executable, "bench/gpu_defects.py", "--json", str(tmp_path / "d.json")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env())
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("PASS", "FAIL", "INFO"))]
    passed = {ln.split()[1].rstrip(":") for ln in lines if ln.startswith("PASS")}
    failed = {ln.split()[1].rstrip(":") for ln in lines if ln.startswith("FAIL")}
    not_here = {ln.split()[1].rstrip(":") for ln in lines if ": not on the host stand-in: " in ln}
    assert r.returncode == 0 and passed == {"ftz", "copy", "staged-streams"} and not failed, r.stdout + r.stderr
    assert not_here == {"ftz", "occupancy", "nccl"}, r.stdout  # no NCCL, no RawModule, no driver: GPU only


def test_the_checks_a_gpu_alone_can_do_say_so_only_by_the_marker(tmp_path):
    """Without HOST_STAND_IN the same stand-in is taken for a real cupy: nccl is tried, and fails."""
    fake = tmp_path / "cupy"
    fake.mkdir()
    text = (STAND_IN / "cupy" / "__init__.py").read_text()
    (fake / "__init__.py").write_text(text.replace("\nHOST_STAND_IN = True", "\n").replace(
        "parents[2]", f"parents[0] / {str(STAND_IN.parent)!r}"))
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    r = subprocess.run([sys.executable, "bench/gpu_defects.py"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=env)
    assert r.returncode == 1 and "FAIL nccl: raised RuntimeError" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "PASS occupancy" in r.stdout and "not on the host stand-in" not in r.stdout, r.stdout


def test_gpu_collectives_script_under_mpirun_on_the_stand_in():
    cmd = mpirun_cmd(2) + [sys.executable, "tests/mpi/gpu_collectives.py", "staged"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("OK mode=staged") == 2 and "PASS ring-staged" in r.stdout, r.stdout


def test_ipc_and_auto_say_they_are_not_on_the_stand_in():
    cmd = mpirun_cmd(2) + [sys.executable, "tests/mpi/gpu_collectives.py", "ipc,ipc-poll,auto"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=_env())
    assert r.returncode == 0 and "PASS" not in r.stdout and "FAIL" not in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    for mode in ("ipc", "ipc-poll", "auto"):
        assert f"INFO ring-{mode}: not on the host stand-in: " in r.stdout, r.stdout
