"""What the GPU ring kernels (csrc/ring/) compile to for sm_90, with the options NVRTC gets.

- Both files compile with nvcc, warnings as errors, and define exactly the entry points
  collectives/gpu_ring/source.py names.
- No kernel spills or has a stack frame (ptxas -v; LDL/STL and cuobjdump -res-usage).
- Registers let a block of source.BLOCK (512) threads be resident: <= 65536 / 512.
- The copy and reduce loops move 16 bytes per thread and access as global memory:
  LDG.E.128 and STG.E.128 in every kernel that moves data, and no generic 128-bit
  LD.E.128 / ST.E.128 (a store through a pointer the compiler does not know is global).
Skipped, with the reason, where nvcc (or, for the SASS half, cuobjdump) is missing.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from collectives.gpu_ring import source
from test_cuda_sass import CUOBJDUMP, NVCC, _per_function, resources  # the same tools and listing parsers

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH or in /usr/local/cuda/bin")
MOVES_DATA = [n for names in source.kernel_names().values() for n in names if n != "rz_probe"]
_SASS_128 = re.compile(r"\b(LDG|STG|LD|ST)\.E\.128\b")


CACHE = Path(os.environ.get("RZ_HOST_CACHE", Path(tempfile.gettempdir()) / "rz-ring-on-host")) / "sass"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """file -> (cubin, ptxas -v output), both files compiled at once (cached by text, options, nvcc)."""
    d = tmp_path_factory.mktemp("ring-sass")
    opts = ["--cubin", "-Werror", "all-warnings", "-Xptxas", "-v", *source.OPTIONS, "--gpu-architecture=sm_90"]
    version = subprocess.run([NVCC, "--version"], capture_output=True, text=True).stdout

    def one(file):
        text = source.kernel_source(file)
        key = hashlib.sha256("\0".join([text, version, *opts]).encode()).hexdigest()[:16]
        cubin, log = CACHE / f"{file}-{key}.cubin", CACHE / f"{file}-{key}.log"
        if not (cubin.exists() and log.exists()):
            src = d / file
            src.write_text(text)
            out = d / (file + ".cubin")
            r = subprocess.run([NVCC, *opts, "-o", str(out), str(src)], capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, r.stderr[-4000:]
            CACHE.mkdir(parents=True, exist_ok=True)
            shutil.copy(out, cubin)
            log.write_text(r.stdout + r.stderr)
        return file, (cubin, log.read_text())
    with ThreadPoolExecutor(len(source.FILES)) as pool:
        return dict(pool.map(one, source.FILES))


def _props(log: str) -> dict[str, tuple[int, int, int, int]]:
    """kernel -> (registers, stack frame, spill stores, spill loads) from ptxas -v."""
    out = {}
    for name, body in _per_function(log, re.compile(r"Compiling entry function '(\w+)'")).items():
        regs = re.search(r"Used (\d+) registers", body)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", body)
        assert regs and frame, body
        out[name] = (int(regs.group(1)), *(int(x) for x in frame.groups()))
    return out


def test_every_entry_point_is_defined(built):
    for file, (_, log) in built.items():
        assert sorted(_props(log)) == sorted(source.kernel_names()[file])


def test_no_kernel_spills_or_has_a_stack_frame_and_512_threads_fit(built):
    table, bad = [], []
    for file, (_, log) in built.items():
        for name, (regs, frame, st, ld) in sorted(_props(log).items()):
            table.append(f"{name:<26} {regs:>3} registers, {frame} B stack, {st}/{ld} B spilled")
            if frame or st or ld:
                bad.append(f"{name}: {frame} bytes stack frame, {st} spill stores, {ld} spill loads")
            if regs * source.BLOCK > 65536:
                bad.append(f"{name}: {regs} registers x {source.BLOCK} threads exceed an SM's 65536")
    print("\n".join(table))
    assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def sass(built):
    if CUOBJDUMP is None:
        pytest.skip("cuobjdump not found (PATH, /usr/local/cuda/bin or $CUOBJDUMP): SASS checks need it")
    out = {}
    for file, (cubin, _) in built.items():
        r = subprocess.run([CUOBJDUMP, "-sass", str(cubin)], capture_output=True, text=True, timeout=300)
        if r.returncode:
            pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {r.stderr.strip()[:200]}")
        res = subprocess.run([CUOBJDUMP, "-res-usage", str(cubin)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        out[file] = (r.stdout, res.stdout)
    return out


def test_copy_and_reduce_loops_use_128_bit_global_accesses(sass):
    bad, seen = [], set()
    for file, (text, _) in sass.items():
        for name, body in _per_function(text, re.compile(r"Function : (\w+)")).items():
            seen.add(name)
            kinds = [m.group(1) for m in _SASS_128.finditer(body)]
            if re.search(r"\b(LDL|STL)\b", body):
                bad.append(f"{name}: local memory (LDL/STL)")
            if name not in MOVES_DATA:
                continue
            if not kinds.count("LDG") or not kinds.count("STG"):
                bad.append(f"{name}: {kinds.count('LDG')} LDG.E.128 and {kinds.count('STG')} STG.E.128")
            generic = kinds.count("LD") + kinds.count("ST")
            if generic:
                bad.append(f"{name}: {generic} generic 128-bit accesses (LD.E.128/ST.E.128): a pointer not known global")
    assert seen >= set(MOVES_DATA)
    assert not bad, "\n".join(bad)


def test_no_local_memory_in_the_cubins(sass):
    bad = []
    for file, (_, res) in sass.items():
        for name, line, fields in resources(res):
            if int(fields["LOCAL"]) or int(fields["STACK"]):
                bad.append(f"{name}: {line}")
    assert not bad, "\n".join(bad)
