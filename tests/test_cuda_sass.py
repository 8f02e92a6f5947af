"""Static checks of what the kernels compile to, for sm_90 with the options NVRTC gets at run time.

- Each .cu file compiles (nvcc, warnings as errors) and defines exactly the
  kernels launch.py asks for.
- Every kernel's vector loop moves each buffer with one 16-byte access per
  thread (8 bytes for the 2-byte side of a cast or a low-precision copy):
  in the SASS (LDG.E.128 / STG.E.128) where cuobjdump and nvdisasm exist,
  else in the PTX (ld.global.v4.u32 and the like).
- No kernel uses local memory: no spills, no stack frame (ptxas -v, and
  cuobjdump -res-usage and LDL/STL in the SASS where they exist).
- Registers per thread leave at least launch.MIN_BLOCKS_PER_SM blocks of
  256 resident per SM (launch.occupancy, the arithmetic the grid sizing
  falls back on; at run time the driver's occupancy sizes the grid).
Skipped, with the reason, where nvcc is missing; the SASS half also where
cuobjdump/nvdisasm are (set CUOBJDUMP to point at one). bench/gpu_check.sh
runs this file on the GPU machine, which has both.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from collectives.kernels import launch
import sharding.optim_cuda  # noqa: F401  (registers sharding/kernels/optim.cu)
from collectives.kernels.cuda_kernels import kernel_source

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def _find_cuobjdump() -> str | None:
    """$CUOBJDUMP, PATH, the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel that
    requirements.txt installs into the virtualenv (with nvdisasm beside it)."""
    found = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if found:
        return found
    import sys
    from pathlib import Path
    for cand in (Path("/usr/local/cuda/bin/cuobjdump"),
                 *Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump")):
        if cand.exists():
            return str(cand)
    return None


CUOBJDUMP = _find_cuobjdump()
FILES = sorted(launch.kernel_names())
SIZE = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i32": 4, "i64": 8}

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH or in /usr/local/cuda/bin")


def buffers(name: str) -> tuple[list[int], list[int]]:
    """Element sizes of the buffers kernel ``name`` reads and writes in its vector loop."""
    parts = name.split("_")[1:]
    if parts[0] == "reduce":
        e = SIZE[parts[2]]
        return [e, e], [e]
    if parts[0] == "scale":
        return [SIZE[parts[1]]], [SIZE[parts[1]]]
    if parts[0] == "cast":
        return [SIZE[parts[1]]], [SIZE[parts[2]]]
    low = [2] if len(parts) == 3 else []
    if parts[0] == "adamw":
        return [4, 4, 4, 4], [4, 4, 4] + low
    if parts[0] == "sgd":
        return [4, 4, 4], [4, 4] + low
    raise ValueError(name)


def vector_bytes(sizes: list[int], everything: list[int]) -> list[int]:
    width = launch.vector_width(*everything)
    return [width * s for s in sizes]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """file -> (cubin path, PTX text, ptxas -v output), compiled as NVRTC compiles them."""
    d = tmp_path_factory.mktemp("sass")
    out = {}
    for file in FILES:
        src = d / file
        src.write_text(kernel_source(file))
        opts = launch.nvrtc_options(file, "sm_90")
        cubin = d / (file + ".cubin")
        keep = d / (file + ".keep")
        keep.mkdir()
        r = subprocess.run([NVCC, "--cubin", "-Werror", "all-warnings", "-Xptxas", "-v", "--keep", "--keep-dir",
                            str(keep), *opts, "-o", str(cubin), str(src)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        (ptx,) = keep.glob("*.ptx")  # the PTX ptxas compiled, kept
        out[file] = (cubin, ptx.read_text(), r.stdout + r.stderr)
    return out


def _per_function(text: str, start: re.Pattern) -> dict[str, str]:
    """Split a PTX or SASS listing into {function: its text}."""
    marks = [(m.start(), m.group(1)) for m in start.finditer(text)]
    return {name: text[pos:(marks[i + 1][0] if i + 1 < len(marks) else len(text))] for i, (pos, name) in enumerate(marks)}


_PTX_ACCESS = re.compile(r"\b(ld|st)\.global(?:\.nc)?(?:\.v(\d))?\.[a-z](\d+)\b")
_SASS_ACCESS = re.compile(r"\b(LDG|STG)\.E((?:\.[A-Z0-9]+)*)")


def ptx_accesses(body: str) -> tuple[list[int], list[int]]:
    loads, stores = [], []
    for op, vec, bits in _PTX_ACCESS.findall(body):
        (loads if op == "ld" else stores).append(int(vec or 1) * int(bits) // 8)
    return loads, stores


def sass_accesses(body: str) -> tuple[list[int], list[int]]:
    loads, stores = [], []
    for op, mods in _SASS_ACCESS.findall(body):
        nbytes = 4
        for m in mods.split(".")[1:]:
            if m.isdigit():
                nbytes = int(m) // 8
            elif m in ("U16", "S16"):
                nbytes = 2
            elif m in ("U8", "S8"):
                nbytes = 1
        (loads if op == "LDG" else stores).append(nbytes)
    return loads, stores


def _check_vectors(name: str, loads: list[int], stores: list[int], where: str) -> list[str]:
    reads, writes = buffers(name)
    every = reads + writes
    bad = []
    for kind, want, got in (("load", vector_bytes(reads, every), loads), ("store", vector_bytes(writes, every), stores)):
        for nbytes in set(want):
            if got.count(nbytes) < want.count(nbytes):
                bad.append(f"{name}: {want.count(nbytes)} {nbytes * 8}-bit {kind}s expected in its vector loop, "
                           f"{where} has {got.count(nbytes)} (all {kind}s: {sorted(got)})")
    return bad


def test_every_vector_loop_uses_full_width_accesses_in_ptx(built):
    bad = []
    for file, (_, ptx, _) in built.items():
        funcs = _per_function(ptx, re.compile(r"\.entry\s+(\w+)\("))
        assert sorted(funcs) == sorted(launch.kernel_names()[file])
        for name, body in funcs.items():
            bad += _check_vectors(name, *ptx_accesses(body), "the PTX")
    assert not bad, "\n".join(bad)


def test_no_kernel_spills_or_uses_a_stack_frame(built):
    bad = []
    for file, (_, _, log) in built.items():
        for name, body in _per_function(log, re.compile(r"Function properties for (\w+)")).items():
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", body)
            assert m, body
            if any(int(x) for x in m.groups()):
                bad.append(f"{name}: {m.group(0)}")
    assert not bad, "\n".join(bad)


def _registers(log: str) -> dict[str, int]:
    regs = {}
    for name, body in _per_function(log, re.compile(r"Compiling entry function '(\w+)'")).items():
        m = re.search(r"Used (\d+) registers", body)
        assert m, body
        regs[name] = int(m.group(1))
    return regs


def test_registers_leave_the_occupancy_the_grid_sizing_assumes(built):
    table, bad = [], []
    for file, (_, _, log) in built.items():
        for name, regs in _registers(log).items():
            occ = launch.occupancy(regs)
            table.append(f"{name:<22} {regs:>3} registers -> {occ} blocks/SM")
            if occ < launch.MIN_BLOCKS_PER_SM:
                bad.append(f"{name}: {regs} registers leave {occ} blocks of {launch.BLOCK} per SM, "
                           f"fewer than {launch.MIN_BLOCKS_PER_SM}")
            # the grid for a large launch is exactly one wave of that occupancy
            pl = launch.plan(name, 1 << 28, [(0, 4)], sm_count=132, blocks_per_sm=occ)
            assert pl.grid == 132 * occ
    print("\n".join(sorted(table)))
    assert len(table) == sum(len(v) for v in launch.kernel_names().values())
    assert not bad, "\n".join(bad)


def _cuobjdump(*args) -> subprocess.CompletedProcess:
    return subprocess.run([CUOBJDUMP, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def sass(built):
    if CUOBJDUMP is None:
        pytest.skip("cuobjdump not found (PATH, /usr/local/cuda/bin or $CUOBJDUMP): SASS checks need it")
    out = {}
    for file, (cubin, _, _) in built.items():
        r = _cuobjdump("-sass", str(cubin))
        if r.returncode:
            pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {r.stderr.strip()[:200]}")
        res = _cuobjdump("-res-usage", str(cubin))
        assert res.returncode == 0, res.stderr
        out[file] = (r.stdout, res.stdout)
    return out


def test_every_vector_loop_compiles_to_128_bit_accesses_in_sass(sass):
    bad = []
    for file, (text, _) in sass.items():
        funcs = _per_function(text, re.compile(r"Function : (\w+)"))
        assert sorted(funcs) == sorted(launch.kernel_names()[file])
        for name, body in funcs.items():
            bad += _check_vectors(name, *sass_accesses(body), "the SASS")
            if re.search(r"\b(LDL|STL)\b", body):
                bad.append(f"{name}: local memory (LDL/STL) in the SASS")
    assert not bad, "\n".join(bad)


def resources(res: str):
    """(function, its line, {REG, STACK, SHARED, LOCAL, ...}) per function of ``cuobjdump --dump-resource-usage``."""
    for name, line in re.findall(r"Function (\w+):\s*\n\s*(REG:.*)", res):
        yield name, line, dict(f.split(":", 1) for f in line.split())


def test_resource_usage_in_the_cubin(sass):
    bad = []
    for file, (_, res) in sass.items():
        for name, line, fields in resources(res):
            if int(fields["LOCAL"]) or int(fields["STACK"]):
                bad.append(f"{name}: {line}")
            if launch.occupancy(int(fields["REG"])) < launch.MIN_BLOCKS_PER_SM:
                bad.append(f"{name}: {fields['REG']} registers")
    assert not bad, "\n".join(bad)
