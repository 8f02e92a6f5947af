"""The direct roads' C programs (collectives/fast/, csrc/fastpath.c).

The kernels are checked here in one process against numpy; the programs under
mpirun (tests/mpi/fast_check.py): exact results over repeated calls, peers that
change arrays, a mismatch and an absent peer after many C calls.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

REPEAT = 4  # calls per case in fast_check.py

from conftest import MPI_SCRIPTS, ROOT, mpi_env, mpirun_cmd

fastpath = pytest.importorskip("collectives._fastpath", reason="the C extension was not built (no C compiler)")

DTYPES = {d: fastpath.DTYPES[np.dtype(d).name] for d in (np.float32, np.float64, np.int32, np.int64)}
OPS = {op: (fastpath.OPS[op], f) for op, f in (("sum", np.add), ("prod", np.multiply), ("max", np.maximum),
                                                ("min", np.minimum))}
PACE = (0.0, 2e-3, 200e-6)  # spin, yield, longest sleep


def _reduce_program(dtype, op, dst, srcs, code=None):
    words = [fastpath.REDUCE if code is None else code, DTYPES[dtype], OPS[op][0], dst.ctypes.data, dst.size, len(srcs),
             *(s.ctypes.data for s in srcs), fastpath.END]
    return np.array(words, np.int64)


def _inputs(dtype, k, count, rng):
    if np.dtype(dtype).kind == "f":  # every class of value: huge (overflow to inf), tiny, inf, nan, signed zeros
        v = rng.standard_normal((k, count)) * rng.choice([1e-40, 1, 1e30, 1e300], (k, count))
        v.flat[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45]
        with np.errstate(over="ignore"):
            return v.astype(dtype)
    info = np.iinfo(dtype)  # the whole range: sums and products wrap
    return rng.integers(info.min, info.max, (k, count), dtype=dtype, endpoint=True)


# float max/min are never programmed (fast.py: numpy's treatment of signed zeros stays in numpy)
CASES = [(d, op) for d in DTYPES for op in OPS if np.dtype(d).kind == "i" or op in ("sum", "prod")]


@pytest.mark.parametrize("code", ["REDUCE", "SREDUCE"])
@pytest.mark.parametrize("dtype,op", CASES)
def test_reduce_kernel_matches_numpy_bit_for_bit(dtype, op, code):
    """dst = src0 op src1 op ... in rank order, the bits direct.py's numpy chain gives,
    for 1 to 5 sources; in place (dst is a source) too. SREDUCE (streaming stores, a tile
    at a time) gives the same bits, at any alignment of dst, and writes nothing past it."""
    rng = np.random.default_rng(7)
    f, code = OPS[op][1], getattr(fastpath, code)
    for k in (1, 2, 3, 5):
        for count in (0, 1, 7, 1000, 4099):
            srcs = list(_inputs(dtype, k, count, rng))
            want = srcs[0].copy()
            with np.errstate(all="ignore"):
                for s in srcs[1:]:
                    want = f(want, s)
            for shift in (0, 1, 5):  # dst's first element that many elements past a 64-byte line
                room = np.zeros(count + 24, dtype)
                lo = (-room.ctypes.data % 64) // room.itemsize + shift
                dst = room[lo:lo + count]
                assert fastpath.run(_reduce_program(dtype, op, dst, srcs, code).ctypes.data, 0, 1e18, *PACE) == 0
                assert dst.tobytes() == want.tobytes(), (k, count, shift)
                assert not room[:lo].any() and not room[lo + count:].any(), (k, count, shift)
            if k > 1:  # in place: the first source is the destination
                first = srcs[0].copy()
                assert fastpath.run(_reduce_program(dtype, op, first, [first] + srcs[1:], code).ctypes.data, 0,
                                    1e18, *PACE) == 0
                assert first.tobytes() == want.tobytes(), (k, count, "in place")


@pytest.mark.parametrize("dtype,op", CASES)
def test_reduce_kernel_with_dst_just_above_a_source_modulo_4k(dtype, op):
    """dst a few bytes above a source modulo 4 KiB (out right after x in malloc's heap): the
    kernel reduces a tile at a time then (wait.c's aliases_4k), with the same bits, whole
    tiles and a remainder, in place with another source so placed too, and writes nothing
    outside dst."""
    rng = np.random.default_rng(11)
    f = OPS[op][1]
    item = np.dtype(dtype).itemsize
    for k in (2, 3):
        for count in (1024 // item * 2, 5000, 12345):
            srcs = list(_inputs(dtype, k, count, rng))
            want = srcs[0].copy()
            with np.errstate(all="ignore"):
                for s in srcs[1:]:
                    want = f(want, s)
            for above in (16, 64, 1000):  # bytes above srcs[1]'s offset within a page
                room = np.zeros((4096 + count * item + 8192) // item, dtype)
                a = np.zeros((4096 + count * item) // item, dtype)
                one = a[(-a.ctypes.data % 4096) // item:][:count]  # srcs[1] on a page's start
                one[:] = srcs[1]
                lo = ((-room.ctypes.data % 4096) + above) // item
                dst = room[lo:lo + count]
                got = [srcs[0], one] + srcs[2:]
                assert fastpath.run(_reduce_program(dtype, op, dst, got).ctypes.data, 0, 1e18, *PACE) == 0
                assert dst.tobytes() == want.tobytes(), (k, count, above)
                assert not room[:lo].any() and not room[lo + count:].any(), (k, count, above)
                dst[:] = srcs[0]  # in place: dst is the first source, the second just below it modulo 4 KiB
                assert fastpath.run(_reduce_program(dtype, op, dst, [dst] + got[1:]).ctypes.data, 0, 1e18,
                                    *PACE) == 0
                assert dst.tobytes() == want.tobytes(), (k, count, above, "in place")


def test_waits_end_at_the_deadline_and_name_the_wait():
    """A WAIT on a flag nobody raises returns 1 + its word index at the deadline."""
    flag = np.zeros(1, np.int64)
    prog = np.array([fastpath.RAISE, flag.ctypes.data, 3, fastpath.WAIT, flag.ctypes.data, 9, 1, 2, fastpath.END],
                    np.int64)
    import time
    t = time.monotonic()
    assert fastpath.run(prog.ctypes.data, 8, time.monotonic() + 0.2, 0.01, 2e-3, 200e-6) == 1 + 3
    assert 0.15 < time.monotonic() - t < 2 and flag[0] == 11  # RAISE wrote base + phase


@pytest.mark.parametrize("start", [0, 1, 15, 63])
def test_stream_copies_exactly_at_every_alignment_and_length(start):
    """STREAM (and the module's stream()) copy every byte, and no byte past the end, for
    destinations and sources at any alignment and lengths around the 64-byte step."""
    rng = np.random.default_rng(start)
    src = rng.integers(0, 256, 5000, dtype=np.uint8)
    for n in (0, 1, 15, 16, 63, 64, 65, 127, 128, 129, 1000, 4097):
        for via in ("op", "function"):
            dst = np.zeros(5000, np.uint8)
            d, s = dst[start + 7:start + 7 + n], src[start:start + n]
            if via == "op":
                prog = np.array([fastpath.STREAM, d.ctypes.data, s.ctypes.data, n, fastpath.END], np.int64)
                assert fastpath.run(prog.ctypes.data, 0, 1e18, *PACE) == 0
            else:
                fastpath.stream(d.ctypes.data, s.ctypes.data, n)
            assert d.tobytes() == s.tobytes(), (n, via)
            assert not dst[:start + 7].any() and not dst[start + 7 + n:].any(), (n, via)


def test_switched_off_by_the_environment():
    """COLLECTIVES_FAST=0: every repeated call stays in Python."""
    for r in _run(2, "grid", COLLECTIVES_FAST="0"):
        assert not r["enabled"] and r["nfail"] == 0 and r["runs"] == 0, r


def _run(n, mode, stage="1", **more):
    env = dict(mpi_env(), **more)
    env.pop("COLLECTIVES_STAGE", None)
    if stage is not None:
        env["COLLECTIVES_STAGE"] = stage
    proc = subprocess.run(mpirun_cmd(n) + [sys.executable, str(MPI_SCRIPTS / "fast_check.py"), mode],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == n, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(lines, key=lambda r: r["rank"])


@pytest.mark.parametrize("n,stage,stream", [(1, "1", None), (2, None, None), (3, "1", None), (2, None, "64"),
                                             (3, "1", "64")])
def test_repeated_calls_run_in_c_and_match_numpy(n, stage, stream):
    """Heap, staged and mixed arrays, every programmed dtype and op, in place or not:
    exact on every call, and most calls ran to the end in C (each plan's first
    call runs in Python; the two-phase all-reduces and a heap rank's in-place
    one-phase all-reduce stay there). COLLECTIVES_STREAM_MIN=64: the reductions and
    copies into out take streaming stores (SREDUCE, STREAM), with the same results."""
    for res in _run(n, "grid", stage, **({} if stream is None else {"COLLECTIVES_STREAM_MIN": stream})):
        assert (res["streamed"] > 0) == (stream is not None and n > 1), res  # off by default
        assert res["enabled"] and res["nfail"] == 0, res["failures"]
        assert res["cases"] > 2000 and res["runs"] > res["cases"] // 2, res
        assert res["barrier_runs"] == 3 or n == 1


def test_peers_that_change_arrays_get_the_python_path():
    """The last rank alternates between two heap arrays: its peers' programs stop
    after the header check (locations changed), the Python path finishes the
    call, and after a few rewrites the plan stays in Python. Exact throughout."""
    res = _run(3, "changed")
    for r in res:
        assert r["nfail"] == 0, r["failures"]
    # rank 0's program expects rank 2's last array: it runs to the end only when rank 2 posts
    # that one again (a program the lane ran in between left the plan's own program as it was)
    assert res[2]["runs"] > 0 and res[0]["runs"] < res[2]["runs"]


def test_mismatch_and_absent_peer_after_many_c_calls():
    res = _run(3, "faults")
    for r in res:
        assert r["nfail"] == 0, r["failures"]
        assert r["runs_before"] == 19 and r["runs_staged"] == 19  # the 19 calls after each plan's first
        assert "op differs (rank 0: sum, rank 1: sum, rank 2: max)" in r["mismatch"]
    for r in res[:2]:
        assert "rank 2 never signalled 'header posted'" in r["timeout"] and r["seconds"] < 5


@pytest.mark.parametrize("n,cma,stream,staged_in_place", [(2, None, None, False), (3, None, "64", False),
                                                         (2, "0", None, False), (2, "0", "64", False),
                                                         (3, None, None, True)])
def test_large_all_gather_pieces_are_read_in_place(n, cma, stream, staged_in_place):
    """All-gather pieces from the tuning table's cma_min_bytes of ordinary arrays are offered in place and
    read with process_vm_readv (in Python, then in C): exact for even and uneven
    pieces, in place, beside a heap input; broadcasts whose root reads in place too.
    COLLECTIVES_CMA=0: staged, still exact. COLLECTIVES_STREAM_MIN=64: every copy into
    out (own pieces, staged pieces, a broadcast's) takes streaming stores, whatever its
    alignment and length, in Python and as the programs' STREAM op, still exact.
    COLLECTIVES_STAGE_MAX_IN_PLACE past every size: in-place pieces are staged instead."""
    env = {} if cma is None else {"COLLECTIVES_CMA": cma}
    if stream is not None:
        env["COLLECTIVES_STREAM_MIN"] = stream
    if staged_in_place:
        env["COLLECTIVES_STAGE_MAX_IN_PLACE"] = str(1 << 30)
    res = _run(n, "cma", **env)
    for r in res:
        assert (r["streamed"] > 0) == (stream is not None), r  # off by default
        assert r["nfail"] == 0 and r["cases"] == 48 + 3 * 2 * 2 * REPEAT, r["failures"]
        assert r["pids"] == (cma is None)
        # broadcasts from MIN_BYTES (2 of 3 sizes): the root offers its input, in place or not
        assert (r["root_offered"] > 0) == (cma is None and r["rank"] in (0, n - 1)), r
        # pieces of MIN_BYTES and more (3 of 4 sizes, x 4 calls): offered outside out and in place (unless
        # staged in place), and not by rank 0 when its input is in the heap
        where = 1 if staged_in_place else 2
        assert r["offered"] == (0 if cma == "0" else 12 * where if r["rank"] == 0 else 12 * (where + 1)), r
        assert r["runs"] > 0


@pytest.mark.parametrize("n", [2, 3])
def test_pushed_all_gathers_and_all_reduces_match_numpy(n):
    """Heap inputs and outs past the push limits: each owner writes its piece (all-gather)
    or reduced segment (all-reduce) into every out, in Python on a plan's first call
    and in C after: exact, even and uneven pieces, in place or not, and beside a rank
    whose private out makes the same calls pull."""
    for r in _run(n, "push"):
        assert r["nfail"] == 0 and r["cases"] == 2 * 3 * 4 * 2, r["failures"]
        assert r["pushed"] == 2 * 2, r  # heap and in place, both splits; not beside a private out
        # in C: every call but each plan's first (all-gather: 2 x 3 cases; all-reduce: heap and in place,
        # twice; private outs pull, in Python, where a rank's in-place heap all-reduce reduces aside)
        assert r["runs"] >= 2 * 3 * (REPEAT - 1), r


@pytest.mark.parametrize("n", [2, 3])
def test_async_calls_run_their_programs_and_time_out_inside_them(n):
    """Async calls waited on at once and queued four deep (the progress thread runs those):
    exact every time, and each plan's later calls ran as its C program, as blocking ones do;
    an async call whose peer never comes raises CollectiveTimeout naming it, within the
    communicator's deadline, from inside the program's wait."""
    res = _run(n, "async")
    for r in res:
        assert r["nfail"] == 0, r["failures"]
        assert r["cases"] == 168 and r["runs"] > r["cases"] // 2, r
        assert r["runs_before"] == 19, r  # the 19 calls after the plan's first
    for r in res[:-1]:
        assert f"rank {n - 1} never signalled 'header posted'" in r["timeout"] and r["seconds"] < 5, r
