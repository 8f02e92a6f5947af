"""Every .cu file in csrc/ compiles with nvcc for sm_90, with the options
NVRTC gets at run time (launch.nvrtc_options), and defines every kernel name
launch.py asks for; and a built wheel carries the sources.

One nvcc invocation per file (to a cubin, so ptxas runs too). Skipped, with
the reason printed, only where nvcc is missing.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from collectives.kernels import launch
from collectives.kernels.cuda_kernels import kernel_source

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
CU_FILES = sorted(p.name for p in launch.CSRC.glob("*.cu"))


def test_every_cu_file_has_launch_options():
    assert CU_FILES == sorted(launch.OPTIONS) == sorted(launch.kernel_names())


@pytest.mark.parametrize("file", CU_FILES)
def test_nvcc_compiles_for_sm90(file, tmp_path):
    if NVCC is None:
        print("SKIP REASON: nvcc not found on PATH or in /usr/local/cuda/bin")
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda/bin")
    # Compile exactly the text NVRTC gets (includes inlined), as NVRTC would see it.
    src = tmp_path / file
    src.write_text(kernel_source(file))
    out = tmp_path / (file + ".cubin")
    # the options NVRTC gets (no flush to zero, IEEE division and square root), for sm_90
    cmd = [NVCC, "--cubin", "-Werror", "all-warnings", *launch.nvrtc_options(file, "sm_90"),
           "-o", str(out), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    blob = out.read_bytes()
    missing = [n for n in launch.kernel_names()[file] if n.encode() + b"\0" not in blob]
    assert not missing, f"{file} does not define {missing}"


def test_sources_have_no_host_includes():
    """NVRTC has no host headers: only our own quoted includes are allowed."""
    for p in list(launch.CSRC.glob("*.cu")) + list(launch.CSRC.glob("*.cuh")):
        for line in p.read_text().splitlines():
            if line.strip().startswith("#include"):
                assert '"' in line, f"{p.name}: {line.strip()} (NVRTC has no system headers)"


def test_wheel_ships_csrc_inside_the_package(tmp_path):
    """`pip wheel .` puts the kernels' sources in collectives/kernels/csrc/, not in a
    top-level csrc/ folder, and an installed copy finds them there."""
    import sys
    import zipfile
    root = tmp_path / "src"  # a copy: building in place would leave build/ and *.egg-info behind
    root.mkdir()
    for part in ("setup.py", "csrc", "collectives", "sharding"):
        src = launch.CSRC.parent / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / part, **({"ignore": shutil.ignore_patterns("__pycache__")} if src.is_dir() else {}))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", str(tmp_path), str(root)],
                       capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = tmp_path.glob("ringzero-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    want = sorted(f"collectives/kernels/csrc/{p.name}" for p in launch.CSRC.glob("*.cu*"))
    assert sorted(n for n in names if "csrc" in n) == want
    assert not [n for n in names if n.startswith("csrc/") or n.startswith("../")]
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    probe = ("from collectives.kernels import launch; from collectives.kernels.cuda_kernels import kernel_source;"
             "print(launch.CSRC); assert 'rz_reduce' in kernel_source('reduce.cu')")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(site / "collectives" / "kernels" / "csrc")
