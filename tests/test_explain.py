"""explain runs the real ring on simulated ranks; its byte totals and steps must match the formulas."""
from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from collectives.teach import explain
from collectives.host.schedule import all_gather_step, reduce_scatter_step, split_counts
from collectives.teach.svg import render_svg

ROOT = Path(__file__).resolve().parent.parent

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]
SVG = "{http://www.w3.org/2000/svg}"


def formula_bytes(op: str, n: int, counts: list[int], itemsize: int, root: int) -> list[tuple[int, int]]:
    """(sent, received) per rank, summed over the schedule's steps (independent of explain.py)."""
    seg = [c * itemsize for c in counts]
    b = sum(seg)
    if n == 1:
        return [(0, 0)]
    out = []
    for r in range(n):
        rs_s = sum(seg[reduce_scatter_step(r, n, t)[0]] for t in range(n - 1))
        rs_r = sum(seg[reduce_scatter_step(r, n, t)[1]] for t in range(n - 1))
        ag_s = sum(seg[all_gather_step(r, n, t)[0]] for t in range(n - 1))
        ag_r = sum(seg[all_gather_step(r, n, t)[1]] for t in range(n - 1))
        if op == "reduce_scatter":
            out.append((rs_s, rs_r))
        elif op == "all_gather":
            out.append((ag_s, ag_r))
        elif op == "all_reduce":
            out.append((rs_s + ag_s, rs_r + ag_r))
        else:
            out.append((0 if r == (root - 1) % n else b, 0 if r == root else b))
    return out


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("count", [0, 1, 7, 16, 37])
@pytest.mark.parametrize("op", OPS)
def test_bytes_and_steps_match_formulas(op, count, world):
    root = count % world
    run = explain.run(op, world, count, root=root, chunk=3)
    counts = split_counts(count, world)
    got = run.tracer.totals()
    want = formula_bytes(op, world, counts, 4, root)
    for r in range(world):
        g = got.get(r, {"sent": 0, "recv": 0})
        assert (g["sent"], g["recv"]) == want[r], f"rank {r}"
    b = count * 4
    if world > 1 and count % world == 0 and op != "broadcast":  # the closed forms, even split
        per = (2 if op == "all_reduce" else 1) * (world - 1) * b // world
        assert all(got[r]["sent"] == per and got[r]["recv"] == per for r in range(world))
    steps = 0 if world == 1 else (2 * (world - 1) if op == "all_reduce" else world - 1)
    assert explain.measured_steps(run) == steps == len(run.steps)
    assert all(c.ok for c in explain.checks(run)), [c for c in explain.checks(run) if not c.ok]


@pytest.mark.parametrize("counts", [[5, 0, 2], [0, 0, 4, 1, 9], [3, 3, 3, 3, 3, 3, 3, 2]])
def test_uneven_counts(counts):
    n = len(counts)
    for op in ["all_reduce", "reduce_scatter", "all_gather"]:
        run = explain.run(op, n, 0, counts=counts, chunk=2)
        got = run.tracer.totals()
        for r, (s, rc) in enumerate(formula_bytes(op, n, counts, 4, 0)):
            assert (got.get(r, {}).get("sent", 0), got.get(r, {}).get("recv", 0)) == (s, rc)
        assert all(c.ok for c in explain.checks(run))


def test_steps_show_schedule_and_buffers():
    run = explain.run("all_reduce", 4, 16, chunk=2)
    assert [(s.phase, s.phase_step) for s in run.steps] == \
        [("reduce-scatter", t) for t in range(3)] + [("all-gather", t) for t in range(3)]
    first = run.steps[0]
    assert [(e["rank"], e["peer"], e["seg"], e["nbytes"], e["chunks"]) for e in first.sends] == \
        [(r, (r + 1) % 4, (r - 1) % 4, 16, 2) for r in range(4)]
    # after the reduce-scatter, rank r holds the full sum (1111) in its own segment r
    after_rs = run.steps[2].views
    for r in range(4):
        s = r
        assert (after_rs[r][4 * s:4 * s + 4] == 1111).all()
        assert explain.contributors(after_rs[r][4 * s], 4) == [0, 1, 2, 3]
    assert all((v == 1111).all() for v in run.steps[-1].views)
    text = explain.render(run)
    assert "step 6/6: all-gather step 2" in text
    assert "rank 0 -> rank 1: seg 3 [12:16), 16 B in 2 chunks" in text
    assert "rank 1 reduces seg 3 [12:16) from rank 0 into its own (now the sum of ranks 0,1)" in text
    assert "    rank 1: [10 x4 | 10 x4 | 10 x4 | 11 x4]" in text  # after step 1
    assert "FAIL" not in text and text.count("[ok]") == 4 + 3


def test_checks_catch_a_wrong_total():
    run = explain.run("reduce_scatter", 3, 9)
    run.tracer.events.append({"action": "send", "rank": 0, "label": "reduce_scatter #0", "phase":
                              "reduce-scatter", "step": 0, "peer": 1, "seg": 2, "nbytes": 4, "t0": 0, "t": 0})
    bad = [c.name for c in explain.checks(run) if not c.ok]
    assert "rank 0 bytes" in bad and "links" in bad


def test_cli_all_reduce():
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "all_reduce", "--ranks", "4", "--count", "16"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "step 1/6: reduce-scatter step 0" in p.stdout
    assert "rank 0: sent     96 B (formula 2B - s0 - s1 = 96)" in p.stdout
    assert "every rank sends 2(N-1)/N x B = 96 B" in p.stdout
    assert "FAIL" not in p.stdout


def test_svg_is_wellformed_and_shows_the_steps(tmp_path):
    run = explain.run("all_reduce", 4, 16)
    path = tmp_path / "ring.svg"
    from collectives.teach.svg import draw
    draw(run, path)
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg" and float(root.get("width")) > 0
    panels = [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]
    assert len(panels) == 1 + 6
    sends = [e for e in root.iter(SVG + "line") if e.get("class") == "send"]
    assert len(sends) == 6 * 4
    assert {(int(e.get("data-src")), int(e.get("data-dst"))) for e in sends} == {(r, (r + 1) % 4) for r in range(4)}
    last = panels[-1]
    cells = [c for c in last.iter(SVG + "rect") if c.get("class") == "cell"]
    assert len(cells) == 16 and all(c.get("data-ranks") == "0,1,2,3" for c in cells)
    first_cells = [c for c in panels[0].iter(SVG + "rect") if c.get("class") == "cell"]
    assert [c.get("data-ranks") for c in first_cells] == [str(r) for r in range(4) for _ in range(4)]


def test_svg_other_ops_render():
    for op, kw in [("all_gather", {}), ("broadcast", {"root": 2}), ("reduce_scatter", {"counts": [2, 0, 5]})]:
        run = explain.run(op, 3, 7, **kw)
        root = ET.fromstring(render_svg(run))
        assert len([g for g in root.iter(SVG + "g") if g.get("class") == "panel"]) == 1 + len(run.steps)


def test_bad_arguments():
    with pytest.raises(ValueError):
        explain.run("all_to_all", 2, 4)
    with pytest.raises(ValueError):
        explain.run("broadcast", 2, 4, root=2)
    with pytest.raises(ValueError):
        explain.run("reduce_scatter", 3, 0, counts=[1, 2])


def test_reference_is_numpy():
    run = explain.run("reduce_scatter", 3, 7)
    assert [o.tolist() for o in run.outputs] == [[111.0] * 3, [111.0] * 2, [111.0] * 2]
    assert np.array_equal(explain.reference(run)[0], run.outputs[0])


# ------------------------------------------------------------------ the direct path
def direct_read_bytes(op: str, n: int, count: int, counts, itemsize: int, root: int) -> list[int]:
    """Bytes each rank reads from its peers, worked out here (independent of volumes.py):
    a peer's segment per peer for a reduce-scatter, every other piece for an all-gather,
    both for an all-reduce (64-byte aligned segments; whole inputs up to 32 KiB)."""
    if n == 1:
        return [0]
    if op == "all_reduce":
        if count * itemsize <= 32 * 1024:
            return [(n - 1) * count * itemsize] * n
        counts = split_counts(count, n, 64 // itemsize)
    seg = [c * itemsize for c in (counts or split_counts(count, n))]
    b = sum(seg)
    return [{"reduce_scatter": (n - 1) * seg[r], "all_gather": b - seg[r], "all_reduce": (n - 1) * seg[r] + b - seg[r],
             "broadcast": 0 if r == root else count * itemsize}[op] for r in range(n)]


@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("op", OPS)
def test_direct_reads_match_formulas(op, world):
    """The real direct code on a stand-in heap: each rank's reads (from its trace) equal the
    formula, nothing is sent, results equal numpy; uneven pieces; the two-phase all-reduce."""
    from collectives.teach.explain_direct import direct_checks, run_direct
    cases = [(c, None) for c in (0, 1, 16, 9000)]
    if op in ("reduce_scatter", "all_gather"):
        cases += [(0, [c % 4 for c in range(2, world + 2)])]
    for count, counts in cases:
        root = count % world
        d = run_direct(op, world, count, root=root, counts=counts)
        got = d.tracer.totals()
        want = direct_read_bytes(op, world, count if counts is None else sum(counts), counts, 4, root)
        assert [got.get(r, {}).get("recv", 0) for r in range(world)] == want, (count, counts)
        assert all(g["sent"] == 0 for g in got.values())
        phases = {e["phase"] for e in d.tracer.data_events()}
        assert all(p.startswith("direct") for p in phases)
        if op == "all_reduce" and count == 9000 and world > 1:  # heap outs: two phases, pushed
            assert phases == {"direct reduce-scatter", "direct all-gather"}
        if op == "all_reduce" and count == 16 and world > 1:  # up to SMALL_BYTES: one phase
            assert phases == {"direct read"}
        bad = [c for c in direct_checks(d) if not c.ok]
        assert not bad, bad


def test_direct_checks_catch_a_wrong_total_and_a_send():
    from collectives.teach.explain_direct import direct_checks, run_direct
    d = run_direct("reduce_scatter", 3, 9)
    d.tracer.events.append({"action": "recv", "rank": 0, "label": "reduce_scatter #0", "phase": "direct reduce-scatter",
                            "step": 0, "peer": 1, "seg": 0, "nbytes": 4, "t0": 0, "t": 0})
    d.tracer.events.append({"action": "send", "rank": 2, "label": "reduce_scatter #0", "phase": "reduce-scatter",
                            "step": 0, "peer": 0, "seg": 0, "nbytes": 4, "t0": 0, "t": 0})
    bad = {c.name for c in direct_checks(d) if not c.ok}
    assert bad == {"rank 0 bytes", "rank 1 bytes", "no sends", "phases"}, bad  # the send is in a ring phase


def test_cli_direct():
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "reduce_scatter", "--ranks", "3", "--counts",
                        "2,0,3", "--algorithm", "direct"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "phase 1/1: direct reduce-scatter" in p.stdout
    assert "rank 2 reads from rank 0: seg 2 [2:5) of its input, 12 B" in p.stdout
    assert "rank 0: read     16 B from peers (formula (N-1) s0 = 16); peers read B - s0 = 12 B" in p.stdout
    assert "  rank 2: [111 x3]" in p.stdout  # its segment summed over ranks 0, 1, 2
    assert "FAIL" not in p.stdout and p.stdout.count("[ok]") == 3 + 3
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "all_reduce", "--count", "9000",
                        "--algorithm", "direct"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0 and "phase 2/2: direct all-gather" in p.stdout and "FAIL" not in p.stdout, p.stderr
    # every out is in explain's heap: the owners write the reduced segments (the push), and explain says so
    assert "rank 1 writes into rank 0's out: reduced seg 1 [2256:4512) of its own output, 9024 B" in p.stdout
    assert "rank 0 reads from rank 1: seg 0 [0:2256) of its input, 9024 B" in p.stdout  # (4 ranks by default)
    assert "(the push: memory sees each input read once" in p.stdout
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "all_reduce", "--algorithm", "direct", "--chunk",
                        "2"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 2 and "applies to the ring, the pipe and the all-reduce read in place only" in p.stderr


def test_svg_draws_direct_reads(tmp_path):
    """One panel for the inputs and one per phase; an arrow per read, from the owner of the
    buffer to the reader; after the last phase every cell holds every rank's data."""
    from collectives.teach.explain_direct import run_direct
    from collectives.teach.svg import draw
    path = tmp_path / "direct.svg"
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "all_reduce", "--ranks", "4", "--count", "9000",
                        "--algorithm", "direct", "--svg", str(path)], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    root = ET.parse(path).getroot()
    panels = [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]
    assert len(panels) == 1 + 2
    for panel in panels[1:]:
        reads = [e for e in panel.iter(SVG + "line") if e.get("class") == "read"]
        assert sorted((int(e.get("data-src")), int(e.get("data-dst"))) for e in reads) == \
            [(q, r) for q in range(4) for r in range(4) if q != r]
    rs_cells = [c for c in panels[1].iter(SVG + "rect") if c.get("class") == "cell"]
    assert [c.get("data-ranks") for c in rs_cells if c.get("data-ranks")] == ["0,1,2,3"] * 4  # own segment only
    last = [c for c in panels[2].iter(SVG + "rect") if c.get("class") == "cell"]
    assert len(last) == 16 and all(c.get("data-ranks") == "0,1,2,3" for c in last)
    d = run_direct("all_gather", 3, 0, counts=[2, 1, 3])
    draw(d, path)
    reads = [e for e in ET.parse(path).getroot().iter(SVG + "line") if e.get("class") == "read"]
    assert sorted((int(e.get("data-src")), int(e.get("data-dst")), int(e.get("data-bytes"))) for e in reads) == \
        [(q, r, [8, 4, 12][q]) for q in range(3) for r in range(3) if q != r]


def private_read_bytes(op, n, count, counts, itemsize, root, mode):
    """direct_read_bytes for ordinary arrays: a staged all-reduce takes one phase up to 32 KiB and
    on two ranks at any size; one read in place always takes two (64-byte aligned segments)."""
    if op == "all_reduce" and n > 1:
        b = count * itemsize
        if mode == "stage" and (b <= 32 * 1024 or n == 2):
            return [(n - 1) * b] * n
        seg = [c * itemsize for c in split_counts(count, n, 64 // itemsize)]
        return [(n - 1) * seg[r] + b - seg[r] for r in range(n)]
    return direct_read_bytes(op, n, count, counts, itemsize, root)


@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("mode,op", [("stage", op) for op in OPS] +
                         [("read", op) for op in ("all_reduce", "all_gather", "broadcast")])
def test_private_reads_match_formulas(mode, op, world, monkeypatch):
    """--algorithm stage and read-in-place: ordinary arrays on the real direct code, staged into
    the stage window or read with process_vm_readv (each read counted), uneven pieces, the
    read-in-place all-reduce in many chunks; reads as worked out here, nothing sent, numpy's
    results, and every rank took the road it names."""
    from collectives.symmetric import cma
    from collectives.teach.explain_direct import _can_read_in_place, direct_checks, run_direct
    if mode == "read" and not _can_read_in_place():
        pytest.skip("this kernel refuses process_vm_readv")
    calls = []
    real = cma.read
    monkeypatch.setattr(cma, "read", lambda dst, src: (calls.append(src.nbytes), real(dst, src))[1])
    cases = [(c, None) for c in (0, 1, 16, 9000)]
    if op in ("reduce_scatter", "all_gather"):
        cases += [(0, [c % 4 for c in range(2, world + 2)])]
    for count, counts in cases:
        root = count % world
        calls.clear()
        chunk = 256 if mode == "read" and op == "all_reduce" else 0
        d = run_direct(op, world, count, root=root, counts=counts, private=mode, chunk=chunk)
        got = d.tracer.totals()
        want = private_read_bytes(op, world, count if counts is None else sum(counts), counts, 4, root, mode)
        assert [got.get(r, {}).get("recv", 0) for r in range(world)] == want, (count, counts)
        assert all(g["sent"] == 0 for g in got.values())
        if mode == "read" and world > 1:  # every byte read from a peer went through process_vm_readv
            assert sum(calls) == sum(want), (count, calls)
            if op == "all_reduce" and count == 9000:  # 256 B chunks of each peer's segment, then each
                # rank reads every peer's reduced segment whole (the ranks' reads interleave in ``calls``)
                big = [c for c in calls if c > 256]
                assert len(big) == world * (world - 1) and len(calls) - len(big) >= 9000 * 4 // 256, calls
        if mode == "stage":
            assert not calls
        bad = [c for c in direct_checks(d) if not c.ok]
        assert not bad, (count, counts, bad)
        names = {c.name for c in direct_checks(d)}
        assert world == 1 or d.nbytes == 0 or ("staged" if mode == "stage" else "read in place") in names


def test_cli_stage():
    run = lambda *a: subprocess.run([sys.executable, "-m", "collectives.teach.explain", *a], capture_output=True,
                                    text=True, cwd=ROOT, timeout=60)
    p = run("all_gather", "--ranks", "3", "--count", "6", "--algorithm", "stage")
    assert p.returncode == 0, p.stderr
    assert "each rank copies its input into its half of the stage window" in p.stdout
    assert "rank 2 reads from rank 1's stage copy: its piece of 2 elements into out [2:4), 8 B" in p.stdout
    assert "returns without waiting" in p.stdout and "[ok] staged" in p.stdout and "FAIL" not in p.stdout
    p = run("all_reduce", "--algorithm", "stage", "--chunk", "4")
    assert p.returncode == 2 and "read in place only" in p.stderr


def test_cli_read_in_place():
    from collectives.teach.explain_direct import _can_read_in_place
    if not _can_read_in_place():
        pytest.skip("this kernel refuses process_vm_readv (not Linux, or a ptrace restriction)")
    run = lambda *a: subprocess.run([sys.executable, "-m", "collectives.teach.explain", *a], capture_output=True,
                                    text=True, cwd=ROOT, timeout=60)
    p = run("all_reduce", "--ranks", "2", "--count", "64", "--algorithm", "read-in-place", "--chunk", "8")
    assert p.returncode == 0, p.stderr
    assert "each rank reduces its own segment in chunks of 32 B" in p.stdout
    assert "rank 0 copies from rank 1's memory (process_vm_readv): seg 0 [0:32) of its input, 128 B" in p.stdout
    assert "rank 1 copies from rank 0's memory (process_vm_readv): reduced seg 0 [0:32) of its output, 128 B" in p.stdout
    assert "  rank 1: [11 x64]" in p.stdout and "[ok] read in place" in p.stdout and "FAIL" not in p.stdout
    p = run("reduce_scatter", "--algorithm", "read-in-place")
    assert p.returncode == 2 and "staged (--algorithm stage) or goes over messages" in p.stderr
    p = run("all_gather", "--algorithm", "read-in-place", "--chunk", "2")
    assert p.returncode == 2 and "pieces are read whole" in p.stderr


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather"])
def test_pipe_reads_match_formulas(op, world):
    """--algorithm pipe: private arrays through the pipe's C loop on simulated ranks (threads),
    many chunks of 64 B; reads as the direct path's formulas, nothing sent, numpy's results."""
    pytest.importorskip("collectives._fastpath", reason="the pipe runs in C: the extension was not built")
    from collectives.teach.explain_direct import direct_checks, run_direct
    cases = [(c, None) for c in (0, 1, 16, 9000)] + ([(0, [c % 4 for c in range(2, world + 2)])]
                                                     if op == "all_gather" else [])
    for count, counts in cases:
        d = run_direct(op, world, count, counts=counts, pipe=64)
        phases = {e["phase"] for e in d.tracer.data_events()}
        assert all(p.startswith("pipelined") for p in phases), phases
        bad = [c for c in direct_checks(d) if not c.ok]
        assert not bad, (count, counts, bad)


def test_cli_pipe():
    pytest.importorskip("collectives._fastpath", reason="the pipe runs in C: the extension was not built")
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "all_reduce", "--ranks", "2", "--count", "9000",
                        "--algorithm", "pipe", "--chunk", "256"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "chunks of 1024 B through 4 slots each" in p.stdout and "steps: 18 " in p.stdout  # 4500 x 4 B / 1024
    assert "phase 2/2: pipelined all-gather" in p.stdout and "FAIL" not in p.stdout
    assert "rank 0 takes from rank 1: seg 0 [0:4496) of its input, through rank 1's slots, 17984 B" in p.stdout
    assert "rank 1 takes from rank 0: reduced seg 0 [0:4496) of its output, through rank 0's reduced slots" in p.stdout
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "reduce_scatter", "--algorithm", "pipe"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 2 and "all-reduces and all-gathers" in p.stderr


def test_cli_cuda_ring_runs_the_kernels_host_build():
    """explain --algorithm cuda-ring: the GPU kernels' own source on CPU threads, which block
    moved which slice through whose slots, byte totals against the formulas, bits the host ring's."""
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("the kernels' host build needs g++")
    p = subprocess.run([sys.executable, "-m", "collectives.teach.explain", "reduce_scatter", "--algorithm",
                        "cuda-ring", "--ranks", "3", "--count", "24"], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "slot r" in p.stdout and "(equal)" in p.stdout and "bit for bit the host ring" in p.stdout
