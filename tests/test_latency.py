"""The per-call fast lanes (issues 10 and 13): what they skip must not change what they do.

- A waiter runs its queued collective itself (Work.run_here / Engine.steal),
  with every call queued before it, head first, so call order holds; the
  progress thread leaves the queue alone while its caller keeps queueing.
- Blocking host calls reuse one Context per communicator (Context.renew):
  a timeout or tracer set on the communicator between calls still applies.
- The torch group's one-tensor lanes (blocking: None, torch's "finished
  already", with errors raised at once; async: a future completed from the Work) give numpy's answers exactly and the Work torch expects.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from collectives import CollectiveTimeout, simulate
from collectives.teach.trace import Tracer
from collectives.engine import Engine


def test_a_waiter_runs_its_queued_collective_itself_in_call_order():
    eng = Engine("test-steal")
    eng._thread = threading.Thread(target=lambda: None)  # never started: only waiters can run the queue
    ran = []
    me = threading.current_thread()
    w1 = eng.submit(lambda: ran.append(("a", threading.current_thread())) or 1, "a")
    w2 = eng.submit(lambda: ran.append(("b", threading.current_thread())) or 2, "b")

    def fails():
        raise ValueError("boom")
    w3 = eng.submit(fails, "c")
    w4 = eng.submit(lambda: ran.append(("d", threading.current_thread())) or 4, "d")
    w2.run_here()  # not next in line: the call before it runs first, here, and nothing after it
    assert w1.is_completed() and w2.is_completed() and not w3.is_completed()
    assert ran == [("a", me), ("b", me)]
    assert w2.wait() == 2 and w1.wait() == 1
    assert w4.wait() == 4  # the failing call before it ran first, its error kept for its own Work
    assert ran[-1] == ("d", me) and w3.is_completed()
    with pytest.raises(ValueError, match="boom"):
        w3.wait()
    assert eng.enter_inline("e")  # nothing left queued or running: a blocking call may run inline
    eng.leave_inline()
    eng._thread = None
    eng.close()


def test_waiting_on_the_last_of_many_queued_calls_runs_them_all_on_the_waiter():
    """DDP's buckets, a batch of async calls: one wait on the last runs every call
    queued before it on the waiting thread, in call order, with no hand-off."""
    eng = Engine("test-batch", grace=0.5)
    me = threading.current_thread()
    ran = []
    try:
        works = [eng.submit(lambda i=i: ran.append((i, threading.current_thread())) or i, f"c{i}")
                 for i in range(64)]
        assert works[-1].wait() == 63
        assert ran == [(i, me) for i in range(64)]
        assert [w.wait() for w in works[:-1]] == list(range(63))
    finally:
        eng.close()


def test_the_progress_thread_leaves_a_burst_to_its_caller():
    """Queued calls the caller keeps adding to (each within the grace of the last) stay
    queued however long the burst lasts, up to the patience; then the thread takes them."""
    import collectives.engine as engine
    if engine._GATE is None:
        pytest.skip("collectives._fastpath is not built")
    eng = Engine("test-burst", grace=0.5, patience=30.0, awake=2.0)  # margins for a loaded machine
    me = threading.current_thread()
    ran = []
    try:
        works = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.2:  # more than twice the grace, a call every 5 ms
            works.append(eng.submit(lambda: ran.append(threading.current_thread()), "burst"))
            time.sleep(0.005)
        during = len(ran)
        deadline = time.monotonic() + 10
        while not works[-1].is_completed() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert during == 0, f"the thread took {during} calls while its caller was still queueing"
        assert len(ran) == len(works) and all(t is not me for t in ran), "after the grace, the thread runs them"
    finally:
        eng.close()
    eng = Engine("test-patience", grace=0.5, patience=0.6, awake=2.0)
    ran = []
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0 and not ran:  # the oldest waits no longer than the patience
            eng.submit(lambda: ran.append(time.monotonic() - t0), "impatient")
            time.sleep(0.005)
        assert ran and 0.6 <= ran[0] < 3.0, ran[:1]
    finally:
        eng.close()


def test_blocking_calls_follow_the_communicators_tracer_and_timeout():
    """The reused host Context takes the communicator's tracer and timeout as they are at each call."""
    def fn(c):
        x = np.arange(8, dtype=np.float32) + c.rank
        first = c.all_reduce(x)
        c.tracer = t = Tracer()
        second = c.all_reduce(x)
        c.tracer = None
        c.all_reduce(x)
        traced = len(t.collectives)
        c.timeout = 0.5
        if c.rank == 1:
            return first, second, traced, None
        t0 = time.monotonic()
        try:
            c.all_reduce(x)  # rank 1 never comes
        except CollectiveTimeout:
            return first, second, traced, time.monotonic() - t0
        return first, second, traced, -1.0

    got = simulate(2, fn, timeout=30.0)
    want = np.arange(8, dtype=np.float32) * 2 + 1
    for first, second, traced, _ in got:
        np.testing.assert_array_equal(first, want)
        np.testing.assert_array_equal(second, want)
        assert traced == 1
    waited = got[0][3]
    assert waited is not None and 0 < waited < 10, f"timed out after {waited} s, not the new 0.5 s"


@pytest.mark.parametrize("world", [1, 3])
def test_torch_group_one_tensor_lanes_blocking_and_async(world):
    torch = pytest.importorskip("torch")
    from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, ReduceScatterOptions

    from collectives.torch_backend.ops import DoneWork
    from collectives.torch_backend.group import RingzeroProcessGroup

    n = 4 * world

    def opts(cls, async_op):
        o = cls()
        o.asyncOp = async_op
        return o

    def fn(c):
        pg = RingzeroProcessGroup(c)
        out = {}
        for a in (False, True):
            t = torch.arange(n, dtype=torch.float32) + c.rank
            w = pg.allreduce([t], opts(AllreduceOptions, a))
            if a:
                out[("ar", a, "wait")] = w.wait() and w.wait()  # torch may wait more than once
                out[("ar", a, "value")] = w.get_future().value()[0] is t
            else:
                out[("ar", a, "none")] = w is None  # finished already: torch's dist.* skip wait()
            out[("ar", a)] = t.numpy().copy()
            x = torch.arange(n, dtype=torch.float64) * (c.rank + 1)
            o = torch.empty(n // world, dtype=torch.float64)
            w = pg.reduce_scatter_single(o, x, opts(ReduceScatterOptions, a))
            if a:
                fut = w.get_future()  # asked for before it finished: the progress thread completes it
                out[("rs", a, "value")] = fut.wait()[0] is o and w.is_completed() and w.is_success()
            else:
                out[("rs", a, "value")] = w is None
            out[("rs", a)] = o.numpy().copy()
            piece = torch.full((3,), c.rank, dtype=torch.int64)
            g = torch.empty(3 * world, dtype=torch.int64)
            w = pg.all_gather_single(g, piece, opts(AllgatherOptions, a))
            if a:
                w.wait()
            else:
                out[("ag", a, "none")] = w is None
            out[("ag", a)] = g.numpy().copy()
        w = pg.allreduce([torch.ones(4, dtype=torch.float64)], opts(AllreduceOptions, False))
        out["one_tensor_done"] = w is None
        w = pg.allreduce([torch.ones(2), torch.ones(3)], opts(AllreduceOptions, False))  # two tensors: _start
        out["two_tensors_done"] = isinstance(w, DoneWork) and w.is_completed() and w.wait()
        c.close()
        for what, call in (("blocking", False), ("async", True)):  # a closed communicator
            try:
                w = pg.allreduce([torch.ones(4)], opts(AllreduceOptions, call))
                if w is not None:
                    w.wait()
                out[("closed_raises", what)] = False
            except RuntimeError as e:
                out[("closed_raises", what)] = "closed" in str(e)
        return out

    got = simulate(world, fn)
    ar = sum(np.arange(n, dtype=np.float32) + r for r in range(world))
    rs = sum(np.arange(n, dtype=np.float64) * (r + 1) for r in range(world))
    ag = np.repeat(np.arange(world, dtype=np.int64), 3)
    for r, out in enumerate(got):
        for a in (False, True):
            np.testing.assert_array_equal(out[("ar", a)], ar)
            np.testing.assert_array_equal(out[("rs", a)], rs[r * (n // world):(r + 1) * (n // world)])
            assert out[("rs", a, "value")], "the future's value is the output tensor, without wait()"
            np.testing.assert_array_equal(out[("ag", a)], ag)
        assert out[("ar", True, "wait")] is True and out[("ar", True, "value")]
        assert out[("ar", False, "none")] and out[("ag", False, "none")], "a blocking call returns None"
        assert out["one_tensor_done"] and out["two_tensors_done"]
        assert out[("closed_raises", "blocking")], "a blocking call raises the error itself"
        assert out[("closed_raises", "async")], "an async call's wait() raises it"


def test_a_tensor_changed_in_place_between_calls_is_adapted_afresh():
    """The adapter remembers small CPU tensors it has seen; set_(), resize_() and
    ``t.data = ...`` between calls must not reuse the old view."""
    torch = pytest.importorskip("torch")

    def fn(c):
        r = c.rank + 1
        t = torch.arange(4, dtype=torch.float32) * r
        got = [c.all_reduce(t, out=t).clone()]
        t.set_(torch.arange(6, dtype=torch.float32) * r)  # new memory, new shape
        got.append(c.all_reduce(t, out=t).clone())
        t.resize_(3)  # same memory, fewer elements
        got.append(c.all_reduce(t, out=t).clone())
        t.data = torch.full((3,), r, dtype=torch.int64)  # new dtype
        got.append(c.all_reduce(t, out=t).clone())
        return got

    for got in simulate(2, fn):
        np.testing.assert_array_equal(got[0].numpy(), np.arange(4, dtype=np.float32) * 3)
        np.testing.assert_array_equal(got[1].numpy(), np.arange(6, dtype=np.float32) * 3)
        np.testing.assert_array_equal(got[2].numpy(), np.arange(3, dtype=np.float32) * 6)
        assert got[3].dtype == torch.int64
        np.testing.assert_array_equal(got[3].numpy(), np.full(3, 3, np.int64))


def test_the_progress_thread_takes_an_unclaimed_call_after_the_grace():
    """With the C gate, a queued call nobody waits for runs on the progress thread once
    it is ``grace`` old, while one waited on at once runs on its caller's thread; the
    thread then sleeps, and a later call still wakes it."""
    import collectives.engine as engine
    if engine._GATE is None:
        pytest.skip("collectives._fastpath is not built")
    eng = Engine("test-gate", grace=0.05, awake=0.2)
    me = threading.current_thread()
    try:
        for rnd in range(3):
            ran = []
            t0 = time.monotonic()
            w = eng.submit(lambda: ran.append((threading.current_thread(), time.monotonic())), "alone")
            deadline = time.monotonic() + 5
            while not w.is_completed() and time.monotonic() < deadline:
                time.sleep(0.0005)
            assert w.is_completed(), f"round {rnd}: an unclaimed call never ran"
            thread, at = ran[0]
            assert thread is not me and at - t0 >= 0.05, (thread, at - t0)
            assert eng.submit(lambda: threading.current_thread(), "waited").wait() is me
            time.sleep(0.3)  # past ``awake``: the thread sleeps on the condition, and submit wakes it
    finally:
        eng.close()
