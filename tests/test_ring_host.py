"""The GPU ring kernels' own source on CPU threads (bench/ring_on_host.py over collectives/gpu_ring/host.py).

g++ compiles csrc/ring/*.cu with csrc/ring/host_shim.h: every GPU thread of every block of
every rank an OS thread, __syncthreads a barrier per block, the counters atomics with the
kernels' orders. Checked here: the whole matrix bit for bit against the ring's order; the
structs' layout against collectives/gpu_ring/layout.py; counters that carry over between
calls by exactly the messages plan.py counts; a missing rank, a host abort and recovery;
the two-process probe; ThreadSanitizer on the protocol, and two deliberately broken
protocols caught.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.append(str(BENCH))  # after the repository: bench/collectives.py is not the package
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the host build compiles csrc/ring with g++")

from collectives.errors import CollectiveError, CollectiveTimeout  # noqa: E402
from collectives.gpu_ring import layout, plan, reference  # noqa: E402
from collectives.gpu_ring.ring import Ring  # noqa: E402

LAST = re.compile(r"^ring on host: (\d+) of (\d+) cases equal the reference$", re.M)


def _script(*args, timeout=300):
    r = subprocess.run([sys.executable, str(BENCH / "ring_on_host.py"), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    m = LAST.search(r.stdout)
    assert m, r.stdout[-3000:] + r.stderr[-3000:]
    return r, int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def rh():
    from collectives.gpu_ring import host
    return host


@pytest.fixture(scope="module")
def backend(rh):
    return rh.HostBackend(block=4)


def test_the_whole_matrix_equals_the_ring_order():
    r, ok, n = _script()
    assert r.returncode == 0 and ok == n >= 500, r.stdout[-3000:]
    assert r.stdout.rstrip().splitlines()[-1] == f"ring on host: {n} of {n} cases equal the reference"


def test_structs_have_the_layout_python_packs(rh, backend):
    assert backend.layout() == rh.layout_expected()


def _buffers(rh, n, count, dtype, seed=0):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(count) * 3).astype(dtype) for _ in range(n)]
    xb = [rh.HostBuffer(count * xs[0].itemsize) for _ in range(n)]
    ob = [rh.HostBuffer(count * xs[0].itemsize) for _ in range(n)]
    for b, x in zip(xb, xs):
        b.view.view(dtype)[:] = x
    return xs, xb, ob


def _ws(ring, r) -> layout.Ws:
    return layout.Ws.from_address(ring.own[r].ptr)


def test_counters_carry_over_by_the_messages_plan_counts(rh, backend):
    n, count = 3, 301
    geo = layout.Geometry(channels=3, slots=2, slot_bytes=32, stage_bytes=1 << 12)
    ring = Ring.virtual(backend, n, geo, timeout_s=10)
    xs, xb, ob = _buffers(rh, n, count, np.float32)
    counts = plan.split_counts(count, n, 16)
    want = [0] * 3
    for coll, nch in (("all_reduce", 3), ("reduce_scatter", 2), ("all_reduce", 1), ("all_gather", 3)):
        c = [counts[r] for r in range(n)]
        xp = [b.ptr for b in xb]
        ring.run(coll, xp, [b.ptr for b in ob], c, np.float32, None if coll == "all_gather" else "sum",
                 kernel="ring", channels=nch)
        offs = plan.offsets(c)
        item = 1 if coll == "all_gather" else 4  # the all-gather kernel counts bytes
        sent = plan.messages(coll, [o * 4 // item for o in offs], nch, item, geo.slot_bytes)
        for ch in range(nch):
            want[ch] += sent[ch]
        for r in range(n):
            w = _ws(ring, r)
            assert [w.chan[ch].sent for ch in range(3)] == want, (coll, r)
            assert [w.chan[ch].recvd for ch in range(3)] == want
            assert [w.chan[ch].ready for ch in range(3)] == want and [w.chan[ch].freed for ch in range(3)] == want
        if coll == "all_reduce":
            got = ob[0].view.view(np.float32)
            assert reference.same(got, reference.expected(coll, xs, counts, "sum")[0]) is None


def _without(backend, n, gone, timeout_s):
    geo = layout.Geometry(channels=2, slots=2, slot_bytes=32, stage_bytes=1 << 12)
    full = Ring.virtual(backend, n, geo, timeout_s=timeout_s)
    here = [r for r in range(n) if r != gone]
    part = Ring(backend, n, here, {r: full.own[r] for r in here}, full.ws_ptrs, geo, timeout_s, full.residency)
    return full, part, here


def test_a_missing_rank_makes_every_other_rank_time_out_naming_its_neighbour(rh, backend):
    n, gone = 5, 2
    full, part, here = _without(backend, n, gone, 0.3)
    xs, xb, ob = _buffers(rh, n, 500, np.float32)
    t = time.perf_counter()
    with pytest.raises(CollectiveTimeout) as info:
        part.run("all_reduce", [xb[r].ptr for r in here], [ob[r].ptr for r in here], plan.split_counts(500, n, 16),
                 np.float32, "sum", kernel="ring")
    assert time.perf_counter() - t < 5
    recs = {e.rank: e for e in info.value.records}
    assert sorted(recs) == here  # every rank that ran reports
    for r, e in recs.items():
        assert e.peer in ((r - 1) % n, (r + 1) % n), str(e)  # it waited for a neighbour
        assert e.origin is not None and e.origin[1] == gone and e.blamed == gone, str(e)  # the gone one is blamed
        assert f"rank {r}" in str(e) and f"waiting for rank {e.peer}" in str(e)
    timed_out = [e for e in recs.values() if e.cause == "timeout"]
    assert timed_out and all(e.blamed == gone for e in timed_out)
    assert f"blaming rank {gone}" in str(info.value) or len(timed_out) == len(recs)
    # the workspaces were reset: the whole ring runs again and is exact
    full.recover()
    full.run("all_reduce", [b.ptr for b in xb], [b.ptr for b in ob], plan.split_counts(500, n, 16), np.float32, "sum")
    assert reference.same(ob[4].view.view(np.float32), reference.expected("all_reduce", xs, plan.split_counts(500, n, 16),
                                                                            "sum")[4]) is None


def test_the_blame_follows_the_chain_of_waiting_ranks_to_the_missing_one(rh, backend):
    """Rank 4's deadline passes first, while it waits for rank 3, which waits for the gone rank 2."""
    n, gone = 5, 2
    full, slow, _ = _without(backend, n, gone, 10.0)
    fast = Ring(backend, n, [4], {4: full.own[4]}, full.ws_ptrs, full.geometry, 0.2, full.residency)
    slow = Ring(backend, n, [0, 1, 3], {r: full.own[r] for r in (0, 1, 3)}, full.ws_ptrs, full.geometry, 10.0,
                full.residency)
    xs, xb, ob = _buffers(rh, n, 500, np.float32)
    counts = plan.split_counts(500, n, 16)
    pending = slow.launch("all_reduce", [xb[r].ptr for r in (0, 1, 3)], [ob[r].ptr for r in (0, 1, 3)], counts,
                          np.float32, "sum", kernel="ring")
    with pytest.raises(CollectiveTimeout) as first:
        fast.run("all_reduce", [xb[4].ptr], [ob[4].ptr], counts, np.float32, "sum", kernel="ring")
    e = first.value
    assert (e.rank, e.cause, e.peer, e.blamed) == (4, "timeout", 3, gone), str(e)
    assert "rank 3 was itself waiting, and the chain of waiting ranks ends at rank 2" in str(e)
    t = time.perf_counter()
    with pytest.raises(CollectiveTimeout) as rest:
        slow.wait(pending)
    assert time.perf_counter() - t < 5  # they left on the abort word, not at their 10 s deadline
    assert {r.cause for r in rest.value.records} == {"aborted"} and all(r.origin == (4, gone) for r in rest.value.records)


def test_the_host_abort_word_makes_every_block_leave(rh, backend):
    n, gone = 3, 0
    full, part, here = _without(backend, n, gone, 30.0)
    xs, xb, ob = _buffers(rh, n, 200, np.float32)
    threading.Timer(0.2, lambda: [full.own[r].abort() for r in here]).start()
    t = time.perf_counter()
    with pytest.raises(CollectiveTimeout) as info:
        part.run("all_reduce", [xb[r].ptr for r in here], [ob[r].ptr for r in here], [64, 64, 72], np.float32, "sum")
    assert time.perf_counter() - t < 5  # not the 30 s deadline
    assert {e.cause for e in info.value.records} == {"host abort"} and "the host aborted" in str(info.value)


def test_a_small_kernel_with_a_missing_rank_names_it(rh, backend):
    n, gone = 4, 3
    full, part, here = _without(backend, n, gone, 0.3)
    xs, xb, ob = _buffers(rh, n, 64, np.float32)
    with pytest.raises(CollectiveTimeout) as info:
        part.run("all_reduce", [xb[r].ptr for r in here], [ob[r].ptr for r in here], [16] * 4, np.float32, "sum",
                 kernel="twoshot", channels=1)
    assert any(e.cause == "timeout" and e.peer == gone for e in info.value.records)
    assert "epoch barrier" in str(info.value)


def _bootstrap(n):
    """An allgather of bytes among n threads (what MPI or a store gives the real setup)."""
    slots, bar = [None] * n, threading.Barrier(n)

    def allgather(rank):
        def go(data: bytes) -> list[bytes]:
            slots[rank] = data
            bar.wait()
            out = list(slots)
            bar.wait()
            return out
        return go
    return allgather


def test_two_processes_on_one_gpu_pass_the_probe_only_together(rh, backend):
    geo = layout.Geometry(channels=1, slots=2, slot_bytes=32, stage_bytes=1 << 12)
    ag = _bootstrap(2)
    rings = [None, None]

    def connect(r):
        rings[r] = Ring.connect(backend, r, 2, ag(r), geo, timeout_s=5, gpu_partner=1 - r, mps=True)
    threads = [threading.Thread(target=connect, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [x.residency.mode for x in rings] == ["mps", "mps"], [x.residency.reason for x in rings]
    # the connected pair runs a collective across the mapped workspaces (one thread each, as two processes would)
    xs, xb, ob = _buffers(rh, 2, 100, np.float32)
    errs = []

    def call(r):
        try:
            rings[r].run("all_reduce", [xb[r].ptr], [ob[r].ptr], [52, 48], np.float32, "sum", kernel="ring")
        except Exception as e:  # reported below
            errs.append(e)
    threads = [threading.Thread(target=call, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errs and reference.same(ob[1].view.view(np.float32), reference.expected("all_reduce", xs, [52, 48], "sum")[1]) is None
    # alone (the partner never launches its half): refused, within the probe's deadline
    t = time.perf_counter()
    with_nobody = Ring.connect(backend, 0, 2, lambda b: [b, rings[1].own[1].export()], geo, gpu_partner=1, mps=True)
    assert not with_nobody.residency.ok and "handshake failed" in with_nobody.residency.reason
    assert time.perf_counter() - t < 2
    # without MPS: refused before any probe
    no_mps = Ring.connect(backend, 0, 2, lambda b: [b, b], geo, gpu_partner=1, mps=False)
    assert not no_mps.residency.ok and "without MPS" in no_mps.residency.reason
    with pytest.raises(CollectiveError):
        Ring.virtual(rh.HostBackend(block=1, sm_count=1, cooperative=False), 2, geo)


def test_launches_on_one_stream_run_one_after_the_other(rh):
    """As on a GPU, a launch starts once the one before it on its stream has finished.

    bench/gpu_ring.py times ``iters`` launches and waits once; had they run at once, two calls
    would read the same epoch counters, the ranks' barrier counts would drift apart, and a
    later barrier would wait for an arrival that never comes (its 10 s timeout). Two halves
    of the probe show the order: on two streams they answer each other; on one stream the
    second starts after the first gave up, so neither is answered."""
    from collectives.gpu_ring.workspace import Workspace
    be = rh.HostBackend(block=1)
    geo = layout.Geometry(channels=1, slots=2, slot_bytes=32, stage_bytes=1 << 12)
    fn = be.function("rz_probe")

    def probes(same_stream: bool) -> tuple[int, int]:
        a, b = Workspace(be, geo), Workspace(be, geo)
        streams = [be.stream()] * 2 if same_stream else [be.stream(), be.stream()]
        for (me, peer), s in zip(((a, b), (b, a)), streams):
            be.launch(fn, 1, 1, layout.Probe(ws=me.ptr, peer=peer.ptr, result=me.probe_ptr, deadline_ns=int(1e9),
                                             rounds=8), s)
        for s in streams:
            be.synchronize(s)
        return int(a.probe_result[0]), int(b.probe_result[0])  # 1: every round in time, 2: late

    assert probes(same_stream=False) == (1, 1)
    t = time.perf_counter()
    assert probes(same_stream=True) == (2, 2)
    assert time.perf_counter() - t >= 2  # one deadline after the other


@pytest.fixture(scope="module")
def sanitized():
    """The three ThreadSanitizer runs (the protocol, and each broken one), started at once:
    each builds its own variant, and the two cores build and run them side by side."""
    runs = {name: subprocess.Popen([sys.executable, str(BENCH / "ring_on_host.py"), "--tsan", *extra], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name, extra in (("clean", ()), ("no-free-wait", ("--broken", "no-free-wait")),
                                ("early-post", ("--broken", "early-post")))}
    out = {}
    for name, p in runs.items():
        so, se = p.communicate(timeout=600)
        m = LAST.search(so)
        assert m, so[-3000:] + se[-3000:]
        races = int(re.search(r"tsan: (\d+) ThreadSanitizer reports", so).group(1))
        out[name] = (p.returncode, int(m.group(1)), int(m.group(2)), races, so)
    return out


def test_under_threadsanitizer_the_protocol_has_no_race(sanitized):
    rc, ok, n, races, text = sanitized["clean"]
    assert ok == n > 50 and races == 0 and "tsan: 0 ThreadSanitizer reports" in text, text[-3000:]
    assert rc == 0


@pytest.mark.parametrize("bug", ["no-free-wait", "early-post"])
def test_a_deliberately_broken_protocol_is_caught(sanitized, bug):
    """A sender that skips the free-slot wait, a counter published before the data barrier."""
    rc, ok, n, races, text = sanitized[bug]
    assert ok < n or races > 0, text[-2000:]
    print(f"{bug}: {n - ok} of {n} cases wrong, {races} race reports")
