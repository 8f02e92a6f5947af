"""bench/ddp.py on 2 ranks: DDP and FSDP2 over ringzero and Gloo, a tiny model, valid JSON and plot."""
import json

from conftest import ROOT, run_mpi


def test_ddp_bench_small_run(tmp_path):
    out, png = tmp_path / "ddp.json", tmp_path / "ddp.png"
    p = run_mpi(2, ROOT / "bench" / "ddp.py", "--width", "12", "--hidden", "24", "--layers", "2", "--batch", "4",
                "--steps", "2", "--rounds", "2", "--warmup", "1", "--json", str(out), "--plot", str(png),
                timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2 and doc["batch"] == 4 and doc["notes"] == []
    recs = doc["records"]
    assert {(r["mode"], r["backend"]) for r in recs} == {(m, b) for m in ("ddp", "fsdp2") for b in ("ringzero", "gloo")}
    params = 12 * 24 + 24 + 24 * 24 + 24 + 24 * 12 + 12
    for r in recs:
        assert r["model"] == "mlp" and r["params"] == params
        assert len(r["rounds_ms"]) == 2 and r["steps_per_s"] > 0
        assert abs(r["step_ms"] - sorted(r["rounds_ms"])[0] / 2 - sorted(r["rounds_ms"])[1] / 2) < 1e-9
        assert len(r["losses"]) == 1 + 2 * 2  # warm-up step, then 2 rounds of 2 steps
        if r["backend"] == "ringzero":
            gloo = next(q for q in recs if (q["mode"], q["backend"]) == (r["mode"], "gloo"))
            ratios = sorted(g / t for g, t in zip(gloo["rounds_ms"], r["rounds_ms"]))
            assert abs(r["ratio_vs_gloo"] - (ratios[0] + ratios[1]) / 2) < 1e-9
            # same data, same seed, same gradients: ringzero trains exactly as Gloo does (2 ranks: a + b is exact)
            assert r["loss_rel_diff_vs_gloo"] < 1e-6
            assert r["losses"][-1] < r["losses"][0]  # and it trains
    rows = [line.split() for line in p.stdout.splitlines() if line.strip() and not line.startswith("#")
            and not line.lstrip().startswith("model")]
    assert len(rows) == 4 and all(row[6].endswith("x") == (row[2] == "ringzero") for row in rows)
    assert png.read_bytes()[:4] == b"\x89PNG"
