"""The CUDA sources as files: every .cu has launch options, none includes a host
header (NVRTC has none), and a built wheel carries them. That each compiles
with nvcc for sm_90 under NVRTC's run-time options, warning-free, and defines
every kernel launch.py asks for is checked in tests/test_cuda_sass.py, which
compiles them once for all its checks.
"""
from __future__ import annotations

import os
import shutil
import subprocess

from collectives.kernels import launch
import sharding.optim_cuda  # noqa: F401  (registers sharding/kernels/optim.cu)

CU_FILES = sorted([p.name for p in launch.CSRC.glob("*.cu")] + [p.name for p in sharding.optim_cuda.KERNELS.glob("*.cu")])


def test_every_cu_file_has_launch_options():
    assert CU_FILES == sorted(launch.OPTIONS) == sorted(launch.kernel_names()) == sorted(launch.SOURCES)


def test_sources_have_no_host_includes():
    """NVRTC has no host headers: only our own quoted includes are allowed."""
    for p in list(launch.CSRC.glob("*.cu")) + list(launch.CSRC.glob("*.cuh")) + [launch.source_path("optim.cu")]:
        for line in p.read_text().splitlines():
            if line.strip().startswith("#include"):
                assert '"' in line, f"{p.name}: {line.strip()} (NVRTC has no system headers)"


def test_wheel_ships_csrc_inside_the_package(tmp_path):
    """`pip wheel .` puts the kernels' sources (and the torch group's C++ calls, which
    torch_backend/native.py builds) in collectives/kernels/csrc/, not in a top-level csrc/
    folder, and an installed copy finds them there."""
    import sys
    import zipfile
    root = tmp_path / "src"  # a copy: building in place would leave build/ and *.egg-info behind
    root.mkdir()
    for part in ("setup.py", "csrc", "collectives", "sharding"):
        src = launch.CSRC.parent / part
        if src.is_dir():
            shutil.copytree(src, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, root / part)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", str(tmp_path), str(root)],
                       capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = tmp_path.glob("ringzero-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    want = sorted([f"collectives/kernels/csrc/{p.name}" for p in launch.CSRC.glob("*.cu*")] +
                  [f"collectives/kernels/csrc/{n}" for n in ("torch_lane.cpp", "lane_api.h")])  # native.py's build
    assert sorted(n for n in names if "csrc" in n) == want
    assert "sharding/kernels/optim.cu" in names  # sharding's kernels ship with sharding
    assert not [n for n in names if n.startswith("csrc/") or n.startswith("../")]
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    probe = ("from collectives.kernels import launch; from collectives.kernels.cuda_kernels import kernel_source;"
             "print(launch.CSRC); assert 'rz_reduce' in kernel_source('reduce.cu')")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(site / "collectives" / "kernels" / "csrc")
