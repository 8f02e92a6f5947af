"""The tracer: byte totals, Chrome trace files, the env var, and a real 4-rank run."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from collectives import simulate
from collectives.teach import explain
from collectives.teach.trace import (Tracer, chrome_totals, load_chrome, merge_chrome, rank_path,
                               tracer_from_env)

from conftest import run_mpi


def _fake(tracer: Tracer, rank: int, label: str = "all_reduce #0") -> None:
    tracer.begin(label, rank=rank)
    tracer.event("send", rank=rank, label=label, phase="reduce-scatter", step=0, peer=(rank + 1) % 2,
                 seg=rank, nbytes=8, data=np.zeros(2))
    t0 = time.perf_counter()
    tracer.event("wait", rank=rank, label=label, what="receive", peer=(rank + 1) % 2, step=0, chunk=0,
                 t0=t0, t1=t0 + 0.5e-3)
    tracer.event("recv", rank=rank, label=label, phase="reduce-scatter", step=0, peer=(rank + 1) % 2,
                 seg=1 - rank, chunk=0, nbytes=8, data=np.ones(2))
    tracer.end(label, rank=rank)


def test_totals_links_and_data():
    t = Tracer()
    for r in range(2):
        _fake(t, r)
    assert t.totals() == {0: {"sent": 8, "recv": 8}, 1: {"sent": 8, "recv": 8}}
    assert t.links() == t.links(side="recv") == {(0, 1): 8, (1, 0): 8}
    assert t.labels() == ["all_reduce #0"]
    assert all("data" not in e for e in t.events)  # not kept unless asked
    k = Tracer(keep_data=True)
    _fake(k, 0)
    assert [e["data"].tolist() for e in k.data_events()] == [[0.0, 0.0], [1.0, 1.0]]


def test_chrome_format(tmp_path):
    t = Tracer()
    for r in range(2):
        _fake(t, r)
    files = t.write_chrome(tmp_path / "trace.json")
    assert files == [tmp_path / "trace.rank0.json", tmp_path / "trace.rank1.json"]
    doc = json.loads(files[0].read_text())
    evs = doc["traceEvents"]
    assert {e["pid"] for e in evs} == {0}
    xs = [e for e in evs if e["ph"] == "X"]
    assert {e["cat"] for e in xs} == {"collective", "send", "wait", "recv"}
    for e in xs:
        assert isinstance(e["ts"], float) and e["dur"] >= 0 and e["tid"] == 0
    coll = next(e for e in xs if e["cat"] == "collective")
    assert coll["args"] == {"bytes_sent": 8, "bytes_recv": 8}
    wait = next(e for e in xs if e["cat"] == "wait")
    assert wait["dur"] == pytest.approx(500, abs=0.01)  # seconds -> microseconds
    for e in xs:  # every event starts inside its collective
        if e is not coll and e["cat"] != "wait":
            assert coll["ts"] <= e["ts"] <= coll["ts"] + coll["dur"]
    merged = merge_chrome(files, tmp_path / "all.json")
    assert chrome_totals(load_chrome(merged)) == t.totals()
    one = t.write_chrome(tmp_path / "one.json", merged=True)
    assert chrome_totals(load_chrome(one)) == t.totals()


def test_rank_path():
    assert str(rank_path("out/trace.json", 3)) == "out/trace.rank3.json"
    assert str(rank_path("trace", 0)) == "trace.rank0"


def test_tracer_from_env(tmp_path):
    assert tracer_from_env("") is None
    path = str(tmp_path / "t.json")
    t = tracer_from_env(path)
    assert t is tracer_from_env(path)  # one per path and process
    _fake(t, 1)
    t.close()
    assert chrome_totals(load_chrome(tmp_path / "t.rank1.json")) == {1: {"sent": 8, "recv": 8}}


def test_thread_safe():
    t = Tracer()

    def worker(r):
        for i in range(200):
            t.event("send", rank=r, label="x", peer=0, nbytes=1)

    ts = [threading.Thread(target=worker, args=(r,)) for r in range(4)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert t.totals() == {r: {"sent": 200, "recv": 0} for r in range(4)}


@pytest.mark.parametrize("world", [2, 3, 5])
def test_communicator_trace_matches_formulas(world):
    """Through the public Communicator (simulated ranks, async too): exact totals per collective."""
    t = Tracer()
    count = 64 * world  # segments stay 64-byte aligned, so the split is even

    def body(comm):
        x = np.ones(count, np.float32)
        comm.all_reduce(x)
        comm.reduce_scatter(x, async_op=True).wait()
        comm.all_gather(np.ones(64, np.float32))

    simulate(world, body, tracer=t, small_bytes=0, chunk_bytes=64)
    b = count * 4
    for label, factor in [("all_reduce #0", 2), ("reduce_scatter #1", 1), ("all_gather #2", 1)]:
        got = t.totals(label)
        assert got == {r: {"sent": factor * (world - 1) * b // world,
                           "recv": factor * (world - 1) * b // world} for r in range(world)}, label
        assert t.links(label) == t.links(label, side="recv")


def test_real_run_trace_matches_formulas_and_explain(tmp_path):
    n, count = 4, 16384
    import os
    os.environ["COLLECTIVES_TRACE"] = str(tmp_path / "trace.json")
    try:
        p = run_mpi(n, "trace_collectives.py", str(count), timeout=120)
    finally:
        del os.environ["COLLECTIVES_TRACE"]
    assert p.returncode == 0, p.stdout + p.stderr
    files = [tmp_path / f"trace.rank{r}.json" for r in range(n)]
    events = load_chrome(files)
    assert {e["pid"] for e in events} == set(range(n))
    labels = {"all_reduce #0": "all_reduce", "reduce_scatter #1": "reduce_scatter",
              "all_gather #2": "all_gather", "broadcast #3": "broadcast"}
    names = {e["name"] for e in events if e.get("cat") == "collective"}
    assert names == set(labels)
    b = count * 4
    for label, op in labels.items():
        got = chrome_totals([e for e in events if e.get("args", {}).get("label") == label])
        # the formulas
        if op == "broadcast":  # root n-1: the chain ends at rank n-2
            want = {r: {"sent": 0 if r == n - 2 else b, "recv": 0 if r == n - 1 else b} for r in range(n)}
        else:
            f = 2 if op == "all_reduce" else 1
            want = {r: {"sent": f * (n - 1) * b // n, "recv": f * (n - 1) * b // n} for r in range(n)}
        assert got == want, label
        # explain, run on simulated ranks with the same split, moves the same bytes
        run = explain.run(op, n, count, root=n - 1)
        assert run.tracer.totals() == got, label
        # the collective's own summary agrees with its events
        for e in events:
            if e.get("cat") == "collective" and e["name"] == label:
                assert (e["args"]["bytes_sent"], e["args"]["bytes_recv"]) == \
                    (got[e["pid"]]["sent"], got[e["pid"]]["recv"])
    steps = {(e["args"]["phase"], e["args"]["step"]) for e in events
             if e.get("cat") == "send" and e["args"]["label"] == "all_reduce #0"}
    assert len(steps) == 2 * (n - 1)
    assert any(e.get("cat") == "reduce" for e in events)


def test_trace_cli_merge_and_totals(tmp_path, capsys):
    from collectives.teach.trace import main
    t = Tracer()
    for r in range(2):
        _fake(t, r)
    files = t.write_chrome(tmp_path / "trace.json")
    assert main(["merge", *map(str, files), "-o", str(tmp_path / "all.json")]) == 0
    capsys.readouterr()
    assert main(["totals", str(tmp_path / "all.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["all_reduce", "#0", "rank", "0:", "sent", "8", "B,", "received", "8", "B"]
    assert len(out) == 4


@pytest.mark.parametrize("n", [2, 3])
def test_a_traced_call_that_runs_a_program_records_what_python_did(n):
    """Heap arrays, every collective, two sizes: a call that runs its plan's C program
    while traced records the bytes the same call recorded in Python, also when the
    program was written while nothing traced (it recorded nothing then)."""
    p = run_mpi(n, "trace_programs.py", timeout=180)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and len(lines) == n, p.stdout[-3000:] + p.stderr[-3000:]
    cases = lines[0]["cases"]
    assert len(cases) == 8
    for name in cases:
        per_rank = {r["rank"]: r["cases"][name] for r in lines}
        assert sum(c["reference"][0].get(str(r), {}).get("recv", 0) for r, c in per_rank.items()) > 0, name
        for c in per_rank.values():
            assert c["ran_in_c"] == 1, (name, c)  # the last traced call ran its program
            assert c["first traced"] == c["reference"] and c["program"] == c["reference"], (name, c)
