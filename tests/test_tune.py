"""bench/tune.py measures the road table's crossovers with forced roads and writes a tuning
file; the library reads that file (RINGZERO_TUNING) in place of its defaults."""
from __future__ import annotations

import json
import subprocess
import sys

from collectives import tuning
from conftest import ROOT, mpi_env, mpirun_cmd


def test_tune_writes_a_file_the_library_reads(tmp_path):
    out = tmp_path / "tuning.json"
    p = subprocess.run(mpirun_cmd(2) + [sys.executable, "bench/tune.py", "--max-bytes", "128K", "--rounds", "2",
                                        "--only", "small,stage,cma,push", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=mpi_env(), cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2 and set(doc["values"]) >= {"small_bytes", "stage_max_all_reduce", "stage_ranks", "cma_min_bytes"}
    for name, seen in doc["measured"].items():
        assert seen and all(r > 0 for _, r in seen), name  # a ratio per size measured
    t = tuning.load({"RINGZERO_TUNING": str(out)})
    for name, value in doc["values"].items():
        assert getattr(t, name) == value and t.origin(name) == str(out)
    assert t.origin("chunk_bytes") == "default"


def test_the_environment_overrides_the_file_and_bad_input_is_named(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"values": {"pipe_min_all_reduce": 1 << 30}}))
    t = tuning.load({"RINGZERO_TUNING": str(f), "COLLECTIVES_PIPE_MIN": "4096"})
    assert t.pipe_min_all_reduce == 4096 and t.origin("pipe_min_all_reduce") == "COLLECTIVES_PIPE_MIN"
    f.write_text(json.dumps({"values": {"no_such_setting": 1}}))
    try:
        tuning.load({"RINGZERO_TUNING": str(f)})
        raise AssertionError("an unknown setting was accepted")
    except ValueError as e:
        assert "no_such_setting" in str(e)
    try:
        tuning.load({"COLLECTIVES_PIPE_MIN": "lots"})
        raise AssertionError("a bad number was accepted")
    except ValueError as e:
        assert "COLLECTIVES_PIPE_MIN" in str(e)


def test_python_m_collectives_tuning_lists_every_setting():
    p = subprocess.run([sys.executable, "-m", "collectives.tuning"], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    for s in tuning.SETTINGS:
        assert sum(line.startswith(f"{s.name} = ") for line in p.stdout.splitlines()) == 1, s.name
