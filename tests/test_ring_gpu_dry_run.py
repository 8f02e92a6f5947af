"""bench/gpu_check.sh's kring step, run here on the host stand-in for cupy (bench/cupy_on_host).

bench/gpu_ring.py and bench/gpu_ring_pair.py are what a lent GPU runs for the kernel ring;
on the stand-in their whole logic runs (input pools, the bit-for-bit checks on every
element and on samples, busbw and efficiency arithmetic, latency per kernel, the JSON,
the two-process bootstrap and refusals) with the kernels on CPU threads, tiny sizes,
so a bug in them shows here and not in the one GPU run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = ROOT / "bench" / "cupy_on_host"
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the kernels' host build needs g++")


def _run(script, *args, timeout=240):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(STAND_IN), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def test_the_virtual_rank_bench_runs_end_to_end(tmp_path):
    out = tmp_path / "gpu-ring.json"
    r = _run("gpu_ring.py", "--ranks", "2,3", "-b", "1K", "-e", "16K", "-f", "4", "--iters", "1", "--copy-bytes", "1M",
             "--check-max", "4K", "--latency", "4K", "--json", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^PASS gpu-ring-exact: (\d+) of \1 calls bit for bit", r.stdout, re.M), r.stdout[-2000:]
    assert "INFO gpu-ring-roofline" in r.stdout and "under 1 GiB" in r.stdout
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert len(rows) == 2 * 2 * 5 * 3 and {row["checked"] for row in rows} == {"all", "sample"}
    assert {row["kernel"] for row in rows} >= {"ring", "oneshot"} and all(row["wrong"] == 0 for row in rows)
    for row in rows:
        factor = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}[row["collective"]] * (row["n"] - 1) / row["n"]
        assert abs(row["busbw"] - row["algbw"] * factor) < 1e-6 * row["algbw"]
        assert row["actual_bytes"] >= row["minimal_bytes"] > 0
    assert {(x["kernel"], x["n"]) for x in data["latency"]} == {(k, n) for k in ("oneshot", "twoshot", "ring") for n in (2, 3)}


def test_the_pair_with_mps_says_it_is_not_on_the_stand_in():
    r = _run("gpu_ring_pair.py", "--mps", "yes", "--expect", "refused", "--bytes", "64K")
    assert r.returncode == 0 and "PASS" not in r.stdout and "FAIL" not in r.stdout, r.stdout + r.stderr
    assert "INFO gpu-ring-pair (--mps yes, expect refused): not on the host stand-in: " in r.stdout, r.stdout


def test_the_two_process_pair_refuses_without_mps(tmp_path):
    out = tmp_path / "pair.json"
    r = _run("gpu_ring_pair.py", "--mps", "no", "--expect", "refused", "--bytes", "64K", "--json", str(out))
    assert r.returncode == 0 and "PASS gpu-ring-pair (--mps no, expect refused): both refused" in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("without MPS") == 2
    assert [x["ok"] for x in json.loads(out.read_text())["pair"]["no"]] == [False, False]


def test_gpu_check_has_the_kring_step():
    text = (ROOT / "bench" / "gpu_check.sh").read_text()
    assert subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_check.sh")]).returncode == 0
    step = text[text.index("step_kring() {"):text.index("step_torch() {")]
    sizes = text[text.index("if \"$PY\" bench/stand_in.py"):text.index("export STAND_IN")]
    gpu = sizes[sizes.index("else"):]  # a GPU's sizes, after the host stand-in's
    assert 'KRING_ARGS="--ranks 2,4,8 -b 4K -e 256M -f 4 --dtypes float32,bfloat16 --copy-bytes 1G' in gpu
    assert 'KRING_WIDE=""' in gpu and "PAIR_BYTES=64M" in gpu
    assert 'bench/gpu_ring.py $KRING_ARGS --json "$out"' in step
    assert "--mps yes --expect refused" in step and "--mps auto --expect ok" in step
    assert "nvidia-cuda-mps-control -d" in step and "echo quit" in step
    assert "want kring && run_step kring" in text
