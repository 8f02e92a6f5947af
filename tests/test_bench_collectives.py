"""bench/collectives.py on 2 ranks: nccl-tests columns and conventions, checked from its JSON."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, mpi_env, mpirun_cmd, run_mpi


def _table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")
            and not line.lstrip().startswith("op")]


def test_bench_records_follow_nccl_tests_conventions(tmp_path):
    """ring, mpi, Gloo and our ring through torch on 2 ranks: every result right, busbw by the
    factors, a paired ratio against each baseline (mpi and gloo) on every other algorithm, and
    torch's paired per-call overhead over ring, in the JSON and the table."""
    out = tmp_path / "bench.json"
    ops = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
    p = run_mpi(2, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "256K", "-f", "16", "-w", "1", "-n", "3",
                "-r", "3", "--op", ",".join(ops), "--algorithm", "ring,mpi,gloo,torch", "--json", str(out), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = json.loads(out.read_text())
    algs = ("ring", "mpi", "gloo", "torch")
    assert {(r["op"], r["algorithm"]) for r in recs} == {(op, alg) for op in ops for alg in algs}
    assert sorted({r["bytes"] for r in recs}) == [1024, 16384, 262144]
    for r in recs:
        assert set(r) >= {"op", "algorithm", "dtype", "bytes", "ranks", "time_us", "algbw", "busbw", "wrong"}
        assert r["wrong"] == 0 and r["ranks"] == 2, r
        # ordinary arrays on two ranks: staged by default (every size here is within the limits)
        assert r["buffers"] == "numpy" and r["stage"] is True
        assert r.get("path") == {"ring": "direct"}.get(r["algorithm"]), r  # raw mpi4py has no road
        assert r["fresh"] is False
        assert abs(r["algbw"] - r["bytes"] / (r["time_us"] * 1e-6) / 1e9) < 1e-9 * max(1, r["algbw"])
        factor = {"all_reduce": 1.0, "broadcast": 1.0}.get(r["op"], 0.5)  # 2(n-1)/n, 1 and (n-1)/n at n = 2
        assert abs(r["busbw"] - r["algbw"] * factor) < 1e-12 + 1e-9 * r["busbw"]
        assert len(r["rounds_us"]) == 3
        # at least -n iterations a block; calls of a few us run more often, to fill --block-ms (2 ms)
        # (from a three-call estimate, so only the clear cases are checked: a Gloo call's
        # first three can take ~1 ms and its later ones ~90 us)
        assert 3 <= r["iters"] <= 5000 and (r["iters"] > 3 or r["time_us"] > 20), r
        assert abs(r["time_us"] - statistics.median(r["rounds_us"])) < 1e-6
        for base in ("mpi", "gloo"):  # the ratio columns are the medians of the round-by-round ratios
            if r["algorithm"] == base:
                assert f"ratio_vs_{base}" not in r
                continue
            paired = statistics.median(b / t for b, t in zip(r[f"{base}_rounds_us"], r["rounds_us"]))
            assert abs(r[f"ratio_vs_{base}"] - paired) < 1e-9
            twin = next(q for q in recs if (q["op"], q["bytes"], q["algorithm"]) == (r["op"], r["bytes"], base))
            assert r[f"{base}_rounds_us"] == twin["rounds_us"]
        if r["algorithm"] == "torch":  # the process group's cost over the bare Communicator, paired
            ring = next(q for q in recs if (q["op"], q["bytes"], q["algorithm"]) == (r["op"], r["bytes"], "ring"))
            diff = statistics.median(t - g for t, g in zip(r["rounds_us"], ring["rounds_us"]))
            assert abs(r["overhead_vs_ring_us"] - diff) < 1e-6
            # torch's own share (the same call on a group that does nothing; a broadcast's asks
            # torch's registry for the root's rank), and the group's rest
            assert "torch_api_us" in r, r
            assert 0 < r["torch_api_us"] < r["time_us"]
            assert abs(r["overhead_ours_us"] - (r["overhead_vs_ring_us"] - r["torch_api_us"])) < 1e-9
        else:
            assert "overhead_vs_ring_us" not in r and "torch_api_us" not in r
    # the printed table says the same: one row per record, #wrong 0, a ratio against each other baseline
    rows = _table(p.stdout)
    assert len(rows) == len(recs)
    assert all(row[9] == "0" for row in rows)
    for row in rows:
        vs_mpi, vs_gloo, over = row[10], row[11], row[12]
        assert (vs_mpi == "-") == (row[5] == "mpi") and (vs_gloo == "-") == (row[5] == "gloo"), row
        assert all(c == "-" or c.endswith("x") for c in (vs_mpi, vs_gloo))
        assert (over == "-") == (row[5] != "torch"), row
        assert (row[13] == "-") == (row[5] != "torch"), row
        assert over == "-" or abs(float(over)) < 1e9


def test_bench_gloo_bfloat16_and_its_limits(tmp_path):
    """Gloo takes bfloat16 through the int16 view (same buffers, results checked), runs on one
    rank, and refuses what it cannot do (avg; GPU arrays) before any rank starts."""
    out = tmp_path / "bench.json"
    p = run_mpi(3, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "1K", "-w", "1", "-n", "2", "-r", "2",
                "--dtype", "bfloat16", "--op", "all_reduce,reduce_scatter,all_gather,broadcast",
                "--algorithm", "gloo,ring", "--json", str(out), timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = json.loads(out.read_text())
    assert len(recs) == 8 and all(r["wrong"] == 0 and r["dtype"] == "bfloat16" for r in recs)
    assert all(r["ratio_vs_gloo"] > 0 for r in recs if r["algorithm"] == "ring")
    # one rank: busbw is 0 for all-reduce (factor 0), the ratios still come from the times
    p = run_mpi(1, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "1K", "-w", "1", "-n", "2", "-r", "2",
                "--op", "all_reduce,broadcast", "--algorithm", "ring,gloo", "--json", str(out), timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    one = json.loads(out.read_text())
    assert len(one) == 4 and all(r["wrong"] == 0 for r in one)
    assert all(r["ratio_vs_gloo"] > 0 for r in one if r["algorithm"] == "ring")
    for bad, why in ((["--redop", "avg"], "no avg"), (["--device", "cuda"], "host arrays only")):
        p = run_mpi(1, ROOT / "bench" / "collectives.py", "--algorithm", "ring,gloo", *bad, timeout=60)
        assert p.returncode != 0 and why in p.stderr, p.stderr


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


def test_bench_symmetric_buffers_take_the_direct_path(tmp_path):
    """--symmetric: every algorithm shares arrays from comm.alloc; all results right, and the
    ring's checked call read its peers' buffers in place (its trace shows direct phases) on
    every collective and size, while MPI and Gloo ran their own collectives on the same arrays.
    COLLECTIVES_STAGE shows in the header and the records."""
    out = tmp_path / "bench.json"
    ops = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
    p = run_mpi(2, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "1M", "-f", "32", "-w", "1", "-n", "2",
                "-r", "2", "--op", ",".join(ops), "--algorithm", "ring,mpi,gloo", "--symmetric",
                "--json", str(out), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "# buffers: symmetric (comm.alloc on ring's communicator" in p.stdout
    assert "# COLLECTIVES_STAGE= (unset" in p.stdout
    recs = json.loads(out.read_text())
    assert {(r["op"], r["algorithm"]) for r in recs} == {(op, a) for op in ops for a in ("ring", "mpi", "gloo")}
    assert sorted({r["bytes"] for r in recs}) == [1024, 32768, 1048576]  # one-phase and two-phase all-reduce
    for r in recs:
        assert r["wrong"] == 0 and r["buffers"] == "symmetric" and r["stage"] is True, r  # the default, 2 ranks
        assert r.get("path") == {"ring": "direct"}.get(r["algorithm"]), r
    assert "# ring path (symmetric buffers): direct reads in 12 of 12 cases" in p.stdout
    assert "# out of bounds values : 0 OK" in p.stdout
    # staging on, one rank: the header and the records say so
    cmd = mpirun_cmd(1) + [sys.executable, str(ROOT / "bench" / "collectives.py"), "-b", "1K", "-e", "1K",
                           "-w", "0", "-n", "1", "-r", "1", "--op", "all_reduce", "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(mpi_env(), COLLECTIVES_STAGE="1"),
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "# COLLECTIVES_STAGE=1: ordinary host arrays staged" in p.stdout
    assert all(r["stage"] is True and r["buffers"] == "numpy" for r in json.loads(out.read_text()))
    # refused before any rank starts
    for bad, why in ((["--symmetric", "--device", "cuda"], "use --device cpu"),
                     (["--symmetric", "--algorithm", "gloo"], "add ring or mpi-api")):
        p = run_mpi(1, ROOT / "bench" / "collectives.py", *bad, timeout=60)
        assert p.returncode != 0 and why in p.stderr, p.stderr


def _deepspeed_built() -> bool:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from peers import deepspeed_missing  # bench/peers.py
    finally:
        sys.path.pop(0)
    return deepspeed_missing() is None


def test_raw_baselines_fresh_views_and_the_breakdown(tmp_path):
    """mpi is mpi4py itself, mpi-api MPI behind our API, deepspeed its shared-memory all-reduce
    (where built; else the table says how to build it): with --fresh views every call, every
    result right, a paired ratio against raw mpi (and deepspeed on all-reduce) on every other
    row; --breakdown adds one record per small case, its parts timed."""
    out = tmp_path / "bench.json"
    ops = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
    p = run_mpi(2, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "16K", "-f", "16", "-w", "1", "-n", "3",
                "-r", "3", "--op", ",".join(ops), "--algorithm", "ring,mpi,mpi-api,deepspeed", "--fresh",
                "--breakdown", "--json", str(out), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "# calls: fresh views x[:] and out[:] on every call (--fresh)" in p.stdout
    recs = json.loads(out.read_text())
    sweep = [r for r in recs if not r.get("breakdown")]
    ds = _deepspeed_built()
    want = {(op, a) for op in ops for a in ("ring", "mpi", "mpi-api")} | ({("all_reduce", "deepspeed")} if ds else set())
    assert {(r["op"], r["algorithm"]) for r in sweep} == want
    if not ds:
        assert "# deepspeed: no rows (" in p.stdout and "make bench-peers" in p.stdout
    for r in sweep:
        assert r["wrong"] == 0 and r["fresh"] is True, r
        assert (r["algorithm"] == "mpi") == ("ratio_vs_mpi" not in r), r
        if r["algorithm"] != "mpi":
            assert r["ratio_vs_mpi"] > 0
        assert ("ratio_vs_deepspeed" in r) == (ds and r["op"] == "all_reduce" and r["algorithm"] != "deepspeed"), r
        assert r.get("path") == {"ring": "direct", "mpi-api": "mpi"}.get(r["algorithm"]), r
    rows = _table(p.stdout)
    assert all(row[9] == "0" for row in rows if len(row) > 9 and row[5] in ("ring", "mpi", "mpi-api", "deepspeed"))
    parts = [r for r in recs if r.get("breakdown")]
    assert {(r["op"], r["bytes"]) for r in parts} == {(op, b) for op in ops for b in (1024, 16384)}
    for r in parts:
        for k in ("mpi", "call", "fresh", "checks", "agreement", "movement"):
            assert 0 < r["parts_us"][k] < 1e5, (k, r)
        assert abs(r["rest_us"] - (r["parts_us"]["call"] - r["parts_us"]["agreement"]
                                   - r["parts_us"]["movement"])) < 1e-9
    assert "# breakdown of small calls" in p.stdout


def test_deepspeed_missing_says_how_to_build_it(tmp_path):
    """Without its op built (TORCH_EXTENSIONS_DIR elsewhere), the deepspeed row says how to get it
    and the rest of the run goes on; raw MPI refuses what it cannot reduce."""
    cmd = mpirun_cmd(1) + [sys.executable, str(ROOT / "bench" / "collectives.py"), "-b", "1K", "-e", "1K", "-w", "0",
                           "-n", "1", "-r", "1", "--op", "all_reduce", "--algorithm", "ring,mpi,deepspeed"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(mpi_env(), TORCH_EXTENSIONS_DIR=str(tmp_path)))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "# deepspeed: no rows (" in p.stdout and "make bench-peers" in p.stdout, p.stdout
    assert len([r for r in _table(p.stdout) if r[5] in ("ring", "mpi")]) == 2
    for bad, why in ((["--algorithm", "mpi", "--dtype", "bfloat16"], "raw MPI reduces"),
                     (["--algorithm", "mpi", "--redop", "avg"], "MPI has no avg"),
                     (["--algorithm", "deepspeed", "--redop", "max"], "--algorithm deepspeed all-reduces")):
        p = run_mpi(1, ROOT / "bench" / "collectives.py", *bad, timeout=60)
        assert p.returncode != 0 and why in p.stderr, p.stderr


def test_ratios_over_launches_give_the_median_and_the_lowest(tmp_path):
    """bench/ratios.py: one launch's ratios as they are; several launches' as median (lowest)."""
    def rec(op, b, r):
        return {"op": op, "algorithm": "ring", "bytes": b, "ratio_vs_mpi": r}
    files = []
    for i, r in enumerate((1.5, 0.9, 1.2)):
        f = tmp_path / f"sweep-{i}.json"
        f.write_text(json.dumps([rec("all_reduce", 1024, r), rec("all_gather", 1024, 2 * r),
                                 {"op": "all_reduce", "algorithm": "mpi", "bytes": 1024}]))
        files.append(str(f))
    one = subprocess.run([sys.executable, "bench/ratios.py", files[0]], capture_output=True, text=True, cwd=ROOT)
    assert one.returncode == 0 and "| 1 KiB | 1.50x | 3.00x |" in one.stdout, one.stdout + one.stderr
    many = subprocess.run([sys.executable, "bench/ratios.py", *files], capture_output=True, text=True, cwd=ROOT)
    assert many.returncode == 0 and "| 1 KiB | 1.20 (0.90) | 2.40 (1.80) |" in many.stdout, many.stdout + many.stderr


def test_in_place_calls_for_every_algorithm(tmp_path):
    """--in-place: all-reduce on out itself and all-gather from the rank's own place in out,
    for ring, raw MPI (MPI.IN_PLACE) and our ring through torch, every result right; at 4 MiB
    the ring's in-place all-gather reads its peer's piece in place (cma.py's offers), and a
    broadcast and reduce-scatter, which --in-place leaves as they are, still run."""
    out = tmp_path / "bench.json"
    ops = ("all_reduce", "all_gather", "reduce_scatter")
    p = run_mpi(2, ROOT / "bench" / "collectives.py", "-b", "16K", "-e", "4M", "-f", "256", "-w", "1", "-n", "3",
                "-r", "3", "--op", ",".join(ops), "--algorithm", "ring,mpi,torch", "--in-place", "--json", str(out),
                timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "all-reduce and all-gather in place (--in-place)" in p.stdout
    recs = json.loads(out.read_text())
    assert {(r["op"], r["algorithm"], r["bytes"]) for r in recs} == \
        {(op, a, b) for op in ops for a in ("ring", "mpi", "torch") for b in (16384, 4 << 20)}
    for r in recs:
        assert r["wrong"] == 0 and r["in_place"] is True, r
    ag = [r for r in recs if r["op"] == "all_gather" and r["algorithm"] == "ring" and r["bytes"] == 4 << 20]
    yama = Path("/proc/sys/kernel/yama/ptrace_scope")  # where the kernel refuses, the ring's messages instead
    read_in_place = not yama.exists() or yama.read_text().strip() == "0"
    assert [r.get("path") for r in ag] == ["direct" if read_in_place else "ring"], ag


def test_async_calls_through_torch_on_fresh_views(tmp_path):
    """--async-op: dist.* with async_op=True, waited on (DDP's and FSDP2's form, the process
    group's Python methods), on fresh views of the tensors, for all four collectives:
    every result right and every torch record says so; without a torch row it is refused."""
    out = tmp_path / "bench.json"
    ops = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
    p = run_mpi(2, ROOT / "bench" / "collectives.py", "-b", "1K", "-e", "64K", "-f", "64", "-w", "1", "-n", "3",
                "-r", "3", "--op", ",".join(ops), "--algorithm", "ring,torch", "--async-op", "--fresh",
                "--json", str(out), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "dist.* calls async_op=True, each waited on (--async-op)" in p.stdout
    recs = json.loads(out.read_text())
    assert {(r["op"], r["algorithm"], r["bytes"]) for r in recs} == \
        {(op, a, b) for op in ops for a in ("ring", "torch") for b in (1024, 65536)}
    for r in recs:
        assert r["wrong"] == 0 and r["fresh"] is True, r
        assert r.get("async_op") is (True if r["algorithm"] == "torch" else None), r
    p = run_mpi(1, ROOT / "bench" / "collectives.py", "--algorithm", "ring", "--async-op", timeout=60)
    assert p.returncode != 0 and "--async-op applies to the torch.distributed rows" in p.stderr, p.stderr


def test_consume_reads_every_result_after_its_call(tmp_path):
    """--consume: each timed call is followed by a read of the whole out (its sum), for every
    algorithm, in that order; results stay right and the records and header say so."""
    import importlib.util

    sys.path.append(str(ROOT / "bench"))  # its own imports (bare_ring, peers ...); the package stays first
    try:
        spec = importlib.util.spec_from_file_location("bench_collectives", ROOT / "bench" / "collectives.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    consumer = bench.consumer
    seen = []

    class Out:
        def sum(self):
            seen.append("read")
    run = consumer(lambda: seen.append("call"), Out())
    run()
    run()
    assert seen == ["call", "read", "call", "read"]
    out = tmp_path / "bench.json"
    p = run_mpi(2, ROOT / "bench" / "collectives.py", "-b", "4K", "-e", "1M", "-f", "256", "-w", "1", "-n", "3",
                "-r", "3", "--op", "all_reduce,all_gather", "--algorithm", "ring,mpi", "--consume", "--json", str(out),
                timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "out read (summed) after every call (--consume)" in p.stdout
    recs = json.loads(out.read_text())
    assert len(recs) == 2 * 2 * 2
    for r in recs:
        assert r["wrong"] == 0 and r["consume"] is True, r


def test_rank_sweep_sums_up_each_launch(tmp_path):
    """bench/rank_sweep.py (the GPU check's ranks step): a sweep and a heap sweep on 2 ranks and
    tune.py there, each launch's records or tuning file in one JSON by name, an INFO line each
    with ring's lowest and highest ratio to raw MPI, and PASS ranks-wrong."""
    out = tmp_path / "ranks.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "rank_sweep.py"), "--ranks", "2", "--max", "256K",
                        "--rounds", "2", "--out", str(out)], capture_output=True, text=True, timeout=300,
                       env=mpi_env(), cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = json.loads(out.read_text())
    assert set(got["launches"]) == {"sweep-n2", "tune-n2", "heap-n2"}
    for name, e in got["launches"].items():
        assert e["status"] == 0 and e["ranks"] == 2 and "data" in e, (name, e)
    assert {r["op"] for r in got["launches"]["sweep-n2"]["data"]} == {"all_reduce", "reduce_scatter", "all_gather"}
    assert all(r["buffers"] != "numpy" for r in got["launches"]["heap-n2"]["data"])
    assert "stage_max_all_reduce" in got["launches"]["tune-n2"]["data"]["values"]
    assert "INFO ranks-sweep-n2: ring vs raw MPI all_reduce" in p.stdout
    assert "INFO ranks-tune-n2: " in p.stdout and "(table " in p.stdout
    assert "PASS ranks-wrong: #wrong 0 in every row of sweep-n2, heap-n2" in p.stdout
    assert (tmp_path / "ranks-log.txt").read_text().count("$ ") == 3  # each launch's command, then its output
