"""bench/plot.py and bench/membw.py: the PNG is a real image with the lines it claims."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from membw import measure_membw  # noqa: E402
from plot import human_bytes, plot_busbw  # noqa: E402


def _records(algs=("ring", "mpi"), ops=("all_reduce", "all_gather")):
    out = []
    for alg in algs:
        for op in ops:
            for k in range(10, 24, 2):
                b = 1 << k
                t = 5.0 + b / 2e3 * {"ring": 1.5, "mpi": 1.0, "gloo": 4.0, "torch": 1.8}.get(alg, 2.5)
                algbw = b / (t * 1e-6) / 1e9
                out.append(dict(op=op, algorithm=alg, dtype="float32", bytes=b, ranks=2, time_us=t,
                                algbw=algbw, busbw=algbw * (1.0 if op == "all_reduce" else 0.5),
                                wrong=1 if (alg, op, k) == ("ring", "all_gather", 12) else 0))
    return out


def _ink(img, color) -> np.ndarray:
    """Pixels within a small distance of an RGB colour."""
    from matplotlib.colors import to_rgb
    return (np.abs(img[..., :3] - np.array(to_rgb(color))) < 0.06).all(axis=-1)


def test_plot_busbw_png(tmp_path):
    path = tmp_path / "busbw.png"
    drawn = plot_busbw(_records(), str(path), membw_gbps=12.5)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn == {"all_reduce": {"mpi": "tab:orange", "ring": "tab:blue"},
                     "all_gather": {"mpi": "tab:orange", "ring": "tab:blue",
                                    "ring: wrong results": "red"}}
    import matplotlib.image as mpimg
    img = mpimg.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 500
    rgb = img[..., :3]
    assert (rgb < 0.9).any(axis=-1).mean() > 0.02  # there is ink, not a blank page
    assert _ink(img, "red").any()  # the wrong case is marked


def test_plot_one_panel_per_op_one_colour_per_algorithm(tmp_path):
    """Four ops, four algorithms: four panels; each algorithm keeps its colour in every panel,
    no two share one, and every panel carries the memory roofline (black, dashed)."""
    path = tmp_path / "p.png"
    ops = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
    drawn = plot_busbw(_records(("ring", "mpi", "gloo", "torch"), ops), str(path), membw_gbps=3.0)
    assert list(drawn) == list(ops)
    colours = {}
    for op, lines in drawn.items():
        for label, colour in lines.items():
            if not label.endswith("wrong results"):
                assert colours.setdefault(label, colour) == colour, (op, label)
        assert {k for k in lines if not k.endswith("wrong results")} == {"ring", "mpi", "gloo", "torch"}
    assert len(set(colours.values())) == 4
    import matplotlib.image as mpimg
    img = mpimg.imread(path)
    h, w = img.shape[:2]
    for qy in (0, 1):  # a 2 x 2 grid: every quadrant has every algorithm's colour and a black roofline
        for qx in (0, 1):
            quad = img[qy * h // 2:(qy + 1) * h // 2, qx * w // 2:(qx + 1) * w // 2]
            for colour in colours.values():
                assert _ink(quad, colour).sum() > 20, (qy, qx, colour)
            black_rows = (_ink(quad, "black").sum(axis=1) > quad.shape[1] * 0.3)
            assert black_rows.any(), (qy, qx)  # the horizontal roofline across the panel


def test_plot_an_unknown_algorithm_gets_a_spare_colour(tmp_path):
    drawn = plot_busbw(_records(("ring", "mine")), str(tmp_path / "u.png"))
    assert drawn["all_reduce"]["ring"] == "tab:blue"
    assert drawn["all_reduce"]["mine"] not in ("tab:blue", "red")


def test_plot_without_membw_and_empty(tmp_path):
    plot_busbw(_records()[:3], str(tmp_path / "a.png"))
    assert (tmp_path / "a.png").stat().st_size > 1000
    with pytest.raises(ValueError):
        plot_busbw([], str(tmp_path / "b.png"))


def test_plot_cli(tmp_path):
    js = tmp_path / "r.json"
    js.write_text(json.dumps(_records()))
    p = subprocess.run([sys.executable, str(BENCH / "plot.py"), str(js), "-o", str(tmp_path / "c.png"),
                        "--membw", "9.5"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_human_bytes():
    assert [human_bytes(b) for b in (512, 1024, 1536, 1 << 20, 64 << 20, 1 << 30)] == \
        ["512", "1K", "1.5K", "1M", "64M", "1G"]


def test_membw_is_plausible():
    gbps = measure_membw(8 << 20, repeats=2)
    assert 0.1 < gbps < 10_000
    with pytest.raises(ValueError):
        measure_membw(0)
    assert np.isfinite(gbps)


def test_zero_bench_small_run(tmp_path):
    """bench/zero.py on 2 ranks: traced bytes match ZeRO's volume, memory shrinks by stage, PNG drawn."""
    sys.path.insert(0, str(BENCH.parent / "tests"))
    from conftest import run_mpi
    out, png = tmp_path / "zero.json", tmp_path / "zero.png"
    p = run_mpi(2, BENCH / "zero.py", "--sizes", "64,96,48", "--batch", "8", "--steps", "1",
                "--json", str(out), "--plot", str(png), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(out.read_text())
    assert [r["stage"] for r in res] == [0, 1, 2, 3]
    for r in res:
        assert r["sent_bytes"] == pytest.approx(r["zero_volume"], rel=0.02)  # padding to the world size
        for c in ("weights", "gradients", "master", "optimizer"):
            assert r["memory"][c] == pytest.approx(r["estimate"][c], rel=0.02, abs=256), (r["stage"], c)
    totals = [r["memory_total"] - r["memory"]["comm"] for r in res]
    assert totals == sorted(totals, reverse=True) and totals[3] < totals[0]
    assert len({round(r["loss"], 5) for r in res}) == 1  # the stage does not change the result
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_zero_volume_formula():
    from zero import zero_volume
    assert zero_volume(1000, 4, 0, 4, 4) == 2 * 0.75 * 1000 * 4
    assert zero_volume(1000, 4, 2, 2, 4) == 0.75 * 1000 * (4 + 2)
    assert zero_volume(1000, 4, 3, 2, 4) == 0.75 * 1000 * (4 + 4)
