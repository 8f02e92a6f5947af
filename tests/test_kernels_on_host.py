"""The kernels' own source run on the CPU (bench/kernels_on_host.py), and what it found.

The host run compiles csrc/*.cu with g++ through bench/kernels_on_host.h and
runs every extern "C" entry point, thread by thread, with the launches
cuda_kernels.py (and sharding/optim_cuda.py) make, against collectives/kernels/reference.py
and sharding/optim_ref.py, bit for bit.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from collectives.kernels import launch
from collectives.kernels import reference as R
from collectives.kernels.numpy_kernels import NUMPY_KERNELS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "kernels_on_host.py"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile csrc/*.cu for the host")


def _run(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=ROOT)
    m = re.search(r"^host run: (\d+) of (\d+) kernels equal the numpy reference$", r.stdout, re.M)
    assert m, r.stdout[-3000:] + r.stderr[-3000:]
    return r, int(m.group(1)), int(m.group(2))


@needs_gxx
def test_every_kernel_on_the_host_equals_the_numpy_reference():
    r, k, n = _run()
    assert n == sum(len(v) for v in launch.kernel_names().values()) == 40, r.stdout
    assert k == n and r.returncode == 0, r.stdout[-4000:]
    assert r.stdout.rstrip().splitlines()[-1] == f"host run: {n} of {n} kernels equal the numpy reference"


@needs_gxx
def test_the_host_run_catches_a_broken_kernel(tmp_path):
    """A one-character bug in bf16 rounding (ties away from even) must show as a failure."""
    src = tmp_path / "csrc"
    shutil.copytree(launch.CSRC, src)
    shutil.copy(launch.source_path("optim.cu"), src)  # sharding's kernel, beside the mutated copy
    common = (src / "rz_common.cuh").read_text()
    assert "0x7fffu + ((u >> 16) & 1u)" in common
    (src / "rz_common.cuh").write_text(common.replace("0x7fffu + ((u >> 16) & 1u)", "0x8000u"))
    r, k, n = _run("--csrc", str(src))
    assert r.returncode == 1 and k < n == 40
    failed = set(re.findall(r"(rz_\w+)\s+FAIL", r.stdout))
    assert "rz_cast_f32_bf16" in failed and "rz_reduce_sum_bf16" in failed
    assert not any(name.endswith("f32") and "cast" not in name for name in failed)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_scale_truncates_at_the_type_minimum(dtype):
    """avg of integers divides like C (toward zero); abs() of the minimum overflowed (found by the host run)."""
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -7, -6, -1, 0, 1, 6, 7, info.max], dtype)
    for d in (1, 2, 3, 7):
        want = np.array([int(v) // d if v >= 0 else -(-int(v) // d) for v in x], dtype)
        assert np.array_equal(R.scale(x, d), want)
        y = x.copy()
        NUMPY_KERNELS.scale(y, d)
        assert np.array_equal(y, want)


@needs_gxx
def test_every_unroll_variant_on_the_host_equals_the_numpy_reference():
    """The sources' default RZ_UNROLL runs above; the other variants bench/kernels.py
    --variants measures on a GPU must be as exact (their predicated remainders differ)."""
    for u in sorted(set(launch.UNROLLS) - {launch.DEFAULT_UNROLL}):  # the default ran above
        r, k, n = _run("--unroll", str(u))
        assert k == n == 40 and r.returncode == 0, (u, r.stdout[-4000:])
