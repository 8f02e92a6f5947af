"""The road table (collectives/roads/): the chooser's rules as pure facts, the table
it prints, forced roads (exact results, or a RoadError saying why), and tracing that
records the road without changing it."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from collectives import Communicator, RoadError, simulate
from collectives.roads import ROWS, Facts, Road, choose, parse
from collectives.teach.trace import Tracer
from collectives.tuning import SETTINGS, defaults, load
from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd

T = defaults()
KiB, MiB = 1 << 10, 1 << 20


def road(**f):
    return choose(Facts(**f), T).road


def test_host_roads():
    assert road(collective="all_reduce", nbytes=KiB, piece=512, world=2) is Road.SMALL
    assert road(collective="all_reduce", nbytes=MiB, piece=MiB // 2, world=2) is Road.PAIR
    assert road(collective="all_reduce", nbytes=MiB, piece=MiB // 3, world=3) is Road.RING
    # in place, past pair_inplace_bytes: still the pair, in blocks through bounded scratch (host/pair.py)
    assert road(collective="all_reduce", nbytes=16 * MiB, piece=8 * MiB, world=2, in_place=True) is Road.PAIR
    assert road(collective="reduce_scatter", nbytes=64 * KiB, piece=32 * KiB, world=3) is Road.RING
    assert road(collective="reduce_scatter", nbytes=16 * KiB, piece=8 * KiB, world=3) is Road.SMALL
    assert road(collective="broadcast", nbytes=8, piece=8, world=3) is Road.RING  # never small
    assert road(collective="barrier", world=5) is Road.SMALL
    assert road(collective="all_reduce", nbytes=MiB, world=2, device=True) is Road.DEVICE_RING
    assert road(collective="all_reduce", nbytes=MiB, world=2, device=True, kernel_ring=True) is Road.CUDA_RING
    assert road(collective="all_reduce", nbytes=KiB, world=2, device=True, kernel_ring=True) is Road.SMALL
    assert road(collective="all_reduce", nbytes=MiB, world=2, algorithm="mpi") is Road.MPI


def test_direct_roads_wait_for_the_header_post():
    c = choose(Facts("all_reduce", MiB, MiB, np.dtype(np.float32), "sum", world=2, direct=True), T)
    assert c.road is Road.DIRECT and c.pending
    f32 = np.dtype(np.float32)
    posted = dict(world=2, direct=True, dtype=f32, op="sum")
    assert road(collective="all_reduce", nbytes=KiB, piece=KiB, staged=True, **posted) is Road.ONE_PHASE
    above = 2 * T.stage_max_all_reduce
    assert road(collective="all_reduce", nbytes=above, piece=above, staged=True, **posted) is Road.STAGED_RING
    # the pipe only where pipe_min_* is set (0 by default: never)
    assert road(collective="all_reduce", nbytes=64 * MiB, piece=64 * MiB, staged=True, **posted) is Road.STAGED_RING
    piped = load({}, pipe_min_all_reduce=32 * MiB, pipe_min_all_gather=64 * MiB)
    assert choose(Facts("all_reduce", 64 * MiB, 64 * MiB, f32, "sum", world=2, direct=True, staged=True),
                  piped).road is Road.PIPE
    assert choose(Facts("all_gather", 64 * MiB, 32 * MiB, f32, None, world=2, direct=True, staged=True),
                  piped).road is Road.PIPE
    assert choose(Facts("all_gather", 32 * MiB, 16 * MiB, f32, None, world=2, direct=True, staged=True),
                  piped).road is Road.STAGED_RING  # below pipe_min_all_gather
    assert road(collective="all_reduce", nbytes=MiB, piece=MiB, staged=False, pushable=True, **posted) is Road.PUSH
    assert road(collective="all_reduce", nbytes=MiB, piece=MiB, staged=False, pushable=False, overlap=False,
                **posted) is Road.ONE_PHASE  # two ranks reading clean inputs
    assert road(collective="all_reduce", nbytes=MiB, piece=MiB, staged=False, pushable=False, overlap=False,
                **dict(posted, world=3)) is Road.DIRECT
    assert road(collective="all_gather", nbytes=2 * MiB, piece=MiB, staged=False, pushable=True, **posted) is Road.PUSH
    assert road(collective="all_gather", nbytes=64 * MiB, piece=32 * MiB, staged=True, **posted) is Road.STAGED_RING
    assert road(collective="all_reduce", nbytes=KiB, world=4, nodes=2, direct=True) is Road.HIER
    # the pipe's C loop has no float max: a staged 64 MiB float max takes the ring
    assert choose(Facts("all_reduce", 64 * MiB, 64 * MiB, f32, "max", world=2, direct=True, staged=True),
                  piped).road is Road.STAGED_RING


@pytest.mark.parametrize("forced,facts,why", [
    (Road.PAIR, dict(collective="all_reduce", nbytes=MiB, world=3), "needs two ranks"),
    (Road.SMALL, dict(collective="all_reduce", nbytes=MiB, world=2), "do not fit in a header message"),
    (Road.SMALL, dict(collective="broadcast", nbytes=8, world=2), "not broadcast"),
    (Road.ONE_PHASE, dict(collective="all_gather", nbytes=8, world=2, direct=True), "not all_gather"),
    (Road.DIRECT, dict(collective="all_reduce", nbytes=8, world=2), "not on the direct path"),
    (Road.RING, dict(collective="all_reduce", nbytes=8, world=2, device=True), "device arrays"),
    (Road.MPI, dict(collective="all_reduce", nbytes=8, world=2), "algorithm='mpi'"),
    (Road.PUSH, dict(collective="all_reduce", nbytes=8, world=2, direct=True, staged=False, pushable=False),
     "out is in the heap"),
    (Road.CUDA_RING, dict(collective="all_reduce", nbytes=8, world=2), "host arrays"),
    (Road.CUDA_RING, dict(collective="all_reduce", nbytes=8, world=2, device=True), "no GPU kernel ring"),
    (Road.CUDA_RING, dict(collective="broadcast", nbytes=8, world=2, device=True), "not broadcast"),
])
def test_a_forced_road_that_cannot_serve_says_why(forced, facts, why):
    with pytest.raises(RoadError, match=why):
        choose(Facts(**facts), T, forced)


def test_parse_forced_roads():
    assert parse("pair") == dict.fromkeys(("all_reduce", "reduce_scatter", "all_gather", "broadcast"), Road.PAIR)
    assert parse("all_reduce:pipe,all_gather:push") == {"all_reduce": Road.PIPE, "all_gather": Road.PUSH}
    assert parse({"barrier": "small"}) == {"barrier": Road.SMALL}
    with pytest.raises(RoadError, match="unknown road 'wormhole'"):
        parse("wormhole")
    with pytest.raises(RoadError, match="unknown collective"):
        parse("gather:ring")


def test_python_m_collectives_roads_prints_every_road_with_where_it_was_measured():
    p = subprocess.run([sys.executable, "-m", "collectives.roads"], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    for row in ROWS:
        assert f"\n{row.road.value}: " in "\n" + p.stdout, row.road
    assert p.stdout.count("; where: ") >= sum(len(r.settings) for r in ROWS)
    assert "bench/results/" in p.stdout


def test_every_setting_says_where_it_was_measured():
    for s in SETTINGS:
        assert s.source and s.doc, s.name


@pytest.mark.parametrize("forced", [Road.SMALL, Road.PAIR, Road.RING])
def test_forced_host_roads_on_simulated_ranks_are_exact(forced):
    def fn(c):
        x = np.arange(1000, dtype=np.float32) + c.rank
        got = c.all_reduce(x, out=np.empty_like(x))
        return got, c.road_taken(), c.road("all_reduce", x).road
    for got, took, says in simulate(2, fn, road=forced):
        assert np.array_equal(got, 2 * np.arange(1000, dtype=np.float32) + 1)
        assert took is forced and says is forced


def test_the_road_query_says_why():
    def fn(c):
        small = c.road("all_reduce", np.zeros(16, np.float32))
        big = c.road("all_reduce", np.zeros(1 << 20, np.float32))
        return small, big
    for small, big in simulate(3, fn):
        assert small.road is Road.SMALL and "header exchange" in small.why
        assert big.road is Road.RING and "3 ranks" in big.why


def test_a_traced_call_takes_the_untraced_road_on_simulated_ranks():
    def fn(c):
        x = np.arange(300000, dtype=np.float32)
        c.all_reduce(x)
        untraced = c.road_taken()
        c.tracer = tracer
        c.all_reduce(x)
        c.tracer = None
        return untraced, c.road_taken()
    for world in (2, 3):
        tracer = Tracer()
        for untraced, traced in simulate(world, fn):
            assert untraced is traced
        assert set(tracer.roads().values()) == {untraced.value}


def _mpi(n, *args, env=None):
    e = dict(mpi_env(), **(env or {}))
    p = subprocess.run(mpirun_cmd(n) + [sys.executable, str(MPI_SCRIPTS / "roads_check.py"), *args],
                       capture_output=True, text=True, timeout=300, env=e, cwd=ROOT)
    lines = [json.loads(s) for s in p.stdout.splitlines() if s.startswith("{")]
    assert p.returncode == 0 and len(lines) == n, p.stdout[-3000:] + p.stderr[-3000:]
    return lines


@pytest.mark.parametrize("forced,n,env", [
    ("mpi", 2, {}), ("small", 3, {}), ("pair", 2, {}), ("ring", 2, {}), ("ring", 3, {}),
    ("direct", 2, {}), ("direct", 3, {}), ("one-phase", 3, {}), ("push", 2, {}), ("push", 3, {}),
    ("staged-ring", 2, {}), ("pipe", 2, {}), ("pipe", 3, {}), ("hier", 4, {"COLLECTIVES_NODE_SIZE": "2"}),
])
def test_every_road_forced_under_mpirun_is_exact(forced, n, env):
    for r in _mpi(n, "force", forced, env=env):
        assert r["nfail"] == 0 and r["cases"] > 0, r["failures"]
        if forced in ("direct", "one-phase", "push"):
            assert r["c_runs"] > 0, r  # repeated calls ran as C programs
        if forced not in ("direct", "hier"):
            assert "cannot serve" in r["refused"], r


@pytest.mark.parametrize("n", [2, 3])
def test_a_traced_call_takes_the_same_road_under_mpirun(n):
    for r in _mpi(n, "traced"):
        assert r["nfail"] == 0, r["failures"]
        assert len(r["roads"]) >= 3, r["roads"]
