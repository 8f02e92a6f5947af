"""The collective runtime on one process: integer avg, the progress engine, wait policy."""
from __future__ import annotations

import numpy as np
import pytest

from collectives.kernels import reference as R
from collectives.kernels.numpy_kernels import NUMPY_KERNELS


@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_int_avg_of_the_type_minimum_keeps_its_sign(dt):
    """A sum of exactly INT_MIN divided by the world size: |INT_MIN| overflows,
    so the old kernel returned a positive quotient."""
    info = np.iinfo(dt)
    x = np.array([info.min, info.min + 1, info.max, -7, 7, -1, 0, -9, 9], dt)
    for d in (1, 2, 3, 4, 8):
        want = np.array([abs(v) // d * (1 if v >= 0 else -1) for v in x.tolist()], dt)  # C division, exact
        y = x.copy()
        NUMPY_KERNELS.scale(y, d)
        assert np.array_equal(y, want), (d, y, want)
        if dt is np.int32:  # the reference widens to int64 first
            assert np.array_equal(y, R.scale(x, d))


def test_uint_avg_divides():
    x = np.array([0, 1, 7, 255], np.uint8)
    NUMPY_KERNELS.scale(x, 2)
    assert x.tolist() == [0, 0, 3, 127]


def test_closing_never_runs_a_queued_task_beside_an_inline_call():
    """A task queued while a blocking call runs inline waits for it, also once
    close() has been called (the loop used to wake on ``_closed`` and run it)."""
    import threading

    from collectives.engine import Engine

    eng = Engine("test")
    inline_running, release, seen = threading.Event(), threading.Event(), []

    def inline():
        inline_running.set()
        release.wait(10)
        return "inline"

    t = threading.Thread(target=lambda: seen.append(eng.run(inline, "inline")))
    t.start()
    assert inline_running.wait(10)
    work = eng.submit(lambda: seen.append(("queued ran while inline ran", not release.is_set())), "queued")
    closer = threading.Thread(target=eng.close)
    closer.start()
    closer.join(0.3)  # old code: the loop wakes on _closed and runs the queued task now
    release.set()
    t.join(10)
    closer.join(10)
    work.wait(10)
    assert ("queued ran while inline ran", True) not in seen, seen
    assert seen[0] == "inline" and seen[1] == ("queued ran while inline ran", False), seen


class _SlowTransport:
    """One message that lands ``after`` seconds from now; counts every poll."""
    rank, size = 0, 2

    def __init__(self, after, core_bound, oversubscribed=False):
        import time

        from collectives.tuning import defaults
        from collectives.waiting import WaitPolicy
        self.ready_at = time.monotonic() + after
        self.policy = WaitPolicy(defaults(), oversubscribed, core_bound)
        self.polls = 0

    def testall(self, handles):
        import time
        self.polls += 1
        return time.monotonic() >= self.ready_at

    def cancel(self, handles):
        pass


def _polls_during_wait(t, on_thread: bool) -> int:
    from collectives.context import Context
    from collectives.engine import Engine

    ctx = Context(t, NUMPY_KERNELS, "all_reduce #0", 10.0, 1024, None)
    call = lambda: ctx.wait([object()], peer=1, step=0, chunk=0, what="receive")  # noqa: E731
    if on_thread:
        eng = Engine("poll-test")
        eng.submit(call, "all_reduce #0").wait(10)
        eng.close()
    else:
        call()
    return t.polls


def test_a_core_bound_progress_thread_sleeps_instead_of_spinning():
    """On the progress thread of a rank without a spare core, a 60 ms wait polls
    a few hundred times (sleeping 20..200 us between polls), not for 20 ms flat
    out against the caller's thread (tens of thousands of polls)."""
    polls = _polls_during_wait(_SlowTransport(0.06, core_bound=True), on_thread=True)
    assert polls < 2000, polls
    # the caller's own thread, a core to itself, still spins first: fastest when nothing else runs
    assert _polls_during_wait(_SlowTransport(0.06, core_bound=True), on_thread=False) > 3 * polls


def test_core_bound_counts_threads_not_ranks():
    from collectives.waiting import busy_policy
    assert busy_policy(2, 8, 8) == (False, False)  # 2 ranks x 2 threads on 8 cores
    assert busy_policy(2, 2, 2) == (False, True)  # a core per rank: the progress thread shares it
    assert busy_policy(2, 8, 1) == (False, True)  # bound to one core by mpirun
    assert busy_policy(4, 2, 2) == (True, True)


def _pinned_bytes(obj, seen=None) -> int:
    """Bytes of every distinct array buffer reachable from ``obj`` (dicts, tuples, objects)."""
    bases, stack = {}, [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, np.ndarray):
            b = o
            while isinstance(b.base, np.ndarray):
                b = b.base
            bases[id(b)] = b
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif hasattr(o, "__dict__"):
            stack.extend(vars(o).values())
    return sum(b.nbytes for b in bases.values())


def test_the_agreement_cache_is_bounded_and_pins_only_scratch():
    """Small all-reduces of 200 growing sizes: the agreement's per-shape cache
    stays bounded, and holds no buffer beyond the communicator's current
    scratch (it kept a view per size, and so every send buffer it outgrew)."""
    from collectives import simulate
    from collectives.safety.agree import MAX_CACHED, agreement_bytes

    def fn(comm):
        for k in range(1, 201):
            y = comm.all_reduce(np.full(k * 16, comm.rank + 1, np.float32))
            assert (y == 3).all()
        scratch = sum(b.nbytes for key, b in comm.scratch.items() if key[0].startswith("agree"))
        return len(comm.cache.get("agree", {})), _pinned_bytes(comm.cache), scratch, agreement_bytes(comm.cache)

    for n_cached, pinned, scratch, reported in simulate(2, fn):
        assert n_cached <= MAX_CACHED
        assert pinned == scratch == reported, (pinned, scratch, reported)


def test_simulated_timeout_names_the_absent_rank_on_every_rank():
    """3 simulated ranks, rank 2 never calls: rank 1 waits on rank 0, not on rank 2,
    yet both live ranks name rank 2 (census.py), and rank 1 is not told to
    suspect rank 0."""
    from collectives import CollectiveTimeout, simulate

    got = simulate(3, lambda c: None if c.rank == 2 else c.all_reduce(np.ones(10, np.float32)),
                   return_exceptions=True, timeout=0.5)
    for r in (0, 1):
        assert isinstance(got[r], CollectiveTimeout), got[r]
        msg = str(got[r])
        assert f"rank {r}:" in msg and "rank 2 never arrived in all_reduce #0" in msg, msg
        assert "ranks 0, 1 are in all_reduce #0" in msg and "did rank 0" not in msg, msg
