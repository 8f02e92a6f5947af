"""bench/collectives.py on 2 ranks: nccl-tests columns and conventions, checked from its JSON."""
import json
import statistics

from conftest import ROOT, run_mpi


def test_bench_records_follow_nccl_tests_conventions(tmp_path):
    out = tmp_path / "bench.json"
    p = run_mpi(2, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "256K", "-f", "16", "-w", "1", "-n", "3",
                "-r", "3", "--op", "all_reduce,reduce_scatter,all_gather", "--json", str(out), timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = json.loads(out.read_text())
    assert {(r["op"], r["algorithm"]) for r in recs} == {
        (op, alg) for op in ("all_reduce", "reduce_scatter", "all_gather") for alg in ("ring", "mpi")}
    assert sorted({r["bytes"] for r in recs}) == [1024, 16384, 262144]
    for r in recs:
        assert set(r) >= {"op", "algorithm", "dtype", "bytes", "ranks", "time_us", "algbw", "busbw", "wrong"}
        assert r["wrong"] == 0 and r["ranks"] == 2
        assert abs(r["algbw"] - r["bytes"] / (r["time_us"] * 1e-6) / 1e9) < 1e-9 * max(1, r["algbw"])
        factor = 1.0 if r["op"] == "all_reduce" else 0.5  # 2(n-1)/n and (n-1)/n at n = 2
        assert abs(r["busbw"] - r["algbw"] * factor) < 1e-12 + 1e-9 * r["busbw"]
        if r["algorithm"] == "ring":  # the ratio column is the median of the round-by-round ratios
            paired = statistics.median(m / t for m, t in zip(r["mpi_rounds_us"], r["rounds_us"]))
            assert abs(r["ratio_vs_mpi"] - paired) < 1e-9
            assert len(r["rounds_us"]) == 3
            assert abs(r["time_us"] - statistics.median(r["rounds_us"])) < 1e-6
    # the printed table says the same: one row per record, #wrong 0, the ratio on ring rows
    rows = [line.split() for line in p.stdout.splitlines() if line.strip() and not line.startswith("#")
            and not line.lstrip().startswith("op")]
    assert len(rows) == len(recs)
    assert all(row[9] == "0" for row in rows)
    assert all(row[10].endswith("x") for row in rows if row[5] == "ring")


def test_bench_bare_ring_is_checked_like_the_others(tmp_path):
    """--algorithm p2p (bench/bare_ring.py) at 3 ranks: every op right (uneven
    all-reduce segments at 1 KiB), its own ratio against MPI, and the ring's
    ratio against it in the JSON."""
    out = tmp_path / "bench.json"
    p = run_mpi(3, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "64K", "-f", "64", "-w", "1", "-n", "2",
                "-r", "2", "--op", "all_reduce,reduce_scatter,all_gather,broadcast", "--algorithm", "ring,mpi,p2p",
                "--json", str(out), timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = json.loads(out.read_text())
    assert {(r["op"], r["algorithm"]) for r in recs} == {
        (op, alg) for op in ("all_reduce", "reduce_scatter", "all_gather", "broadcast") for alg in ("ring", "mpi", "p2p")}
    assert all(r["wrong"] == 0 and r["ranks"] == 3 for r in recs)
    for r in recs:
        if r["algorithm"] == "ring":
            assert r["ratio_vs_p2p"] > 0
        if r["algorithm"] == "p2p":
            assert abs(r["ratio_vs_mpi"] - statistics.median(
                m / t for m, t in zip(r["mpi_rounds_us"], r["rounds_us"]))) < 1e-9


def test_bench_refuses_the_bare_ring_on_gpu_arrays():
    p = run_mpi(1, ROOT / "bench" / "collectives.py", "--algorithm", "p2p", "--device", "cuda", timeout=60)
    assert p.returncode != 0 and "host arrays only" in p.stderr
