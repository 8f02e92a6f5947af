"""Per-call plans (collectives/plan.py, collectives/plan_cache.py): a repeated call on the
same objects, or on arrays just like them, reuses its checks and header, and must still
behave exactly like a first call.

Each test runs simulated ranks in one process and checks results against numpy.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from collectives import MismatchError, simulate
from collectives.plan_cache import MAX_PLANS, SMALL_BYTES

BIG = SMALL_BYTES // 4 + 1024  # float32 elements: held by weak reference only


@pytest.mark.parametrize("world", [1, 2])
def test_a_reused_id_gets_its_own_plan(world):
    """A plan made for one array never serves another that took its id (one rank: one
    thread, so the allocator surely hands the id out again)."""
    def fn(c):
        r = c.rank + 1
        out, reused = [], 0
        for n in (8, BIG):
            a = np.full(n, r, np.float32)
            out.append(c.all_reduce(a).copy())
            old = id(a)
            if n == BIG:
                ref = weakref.ref(a)
                del a
                gc.collect()
                assert ref() is None, "a large array's plan must not keep it alive"
                assert not any(k[1] == old for k in c.plans), "its plan left with it"
            else:
                del a
                for _ in range(MAX_PLANS):  # other calls push the small array's plan out
                    c.all_reduce(np.zeros(1, np.float32))
            keep = []
            for _ in range(1000):  # the allocator hands the id out again, to another shape and dtype
                b = np.empty(n + 3, np.float64)
                if id(b) == old:
                    reused += 1
                    break
                keep.append(b)
            b[:] = r
            out.append(c.all_reduce(b).copy())
        return out, reused

    s = sum(range(1, world + 1))
    for out, reused in simulate(world, fn):
        # one thread: the allocator hands the id out again, in at least one of the two cases (in the
        # other, an object the calls made in between may hold it for good)
        assert world > 1 or reused >= 1, "the test needs the id reused"
        np.testing.assert_array_equal(out[0], np.full(8, s, np.float32))
        np.testing.assert_array_equal(out[1], np.full(11, s, np.float64))
        np.testing.assert_array_equal(out[2], np.full(BIG, s, np.float32))
        np.testing.assert_array_equal(out[3], np.full(BIG + 3, s, np.float64))


@pytest.mark.parametrize("n", [12, BIG])
def test_an_array_changed_in_place_takes_the_full_path(n):
    """Shape, dtype and flags set on the same object between calls are seen."""
    def fn(c):
        r = c.rank + 1
        a = np.arange(n, dtype=np.int64).reshape(2, -1) * r
        o = np.empty(n, np.int64)
        got = [c.all_reduce(a).copy(), c.all_reduce(a, out=o).copy()]
        a.shape = (n,)  # same memory, new shape: the result takes it
        got.append(c.all_reduce(a).copy())
        a.dtype = np.int32  # same memory, twice the elements, another type
        got.append(c.all_reduce(a, op="max").copy())
        o.shape = (2, -1)
        got.append(c.all_reduce(np.arange(n, dtype=np.int64) * r, out=o).copy())
        b = np.arange(n, dtype=np.int64) * r
        c.all_reduce(b, out=b)
        try:  # the plan's weak reference makes numpy refuse to move its memory
            b.resize(2 * n, refcheck=False)
        except ValueError as e:
            got.append(str(e))
        o.flags.writeable = False
        try:
            c.all_reduce(np.arange(n, dtype=np.int64), out=o)
        except ValueError as e:
            got.append(str(e))
        return got

    want = np.arange(n, dtype=np.int64) * 3
    for got in simulate(2, fn):
        assert got[0].shape == (2, n // 2)
        np.testing.assert_array_equal(got[0].reshape(-1), want)
        np.testing.assert_array_equal(got[1], want)
        assert got[2].shape == (n,)
        np.testing.assert_array_equal(got[2], want)
        assert got[3].dtype == np.int32 and got[3].size == 2 * n
        np.testing.assert_array_equal(got[3], (np.arange(n, dtype=np.int64) * 2).view(np.int32))
        assert got[4].shape == (2, n // 2)
        np.testing.assert_array_equal(got[4].reshape(-1), want)
        assert "cannot resize" in got[5]
        assert "read-only" in got[6], "an out made read-only after a cached call is refused"


def test_a_read_only_out_is_refused_after_cached_calls_then_the_communicator_goes_on():
    def fn(c):
        x = np.ones(16, np.float32) * (c.rank + 1)
        o = np.empty(16, np.float32)
        g = np.empty(32, np.float32)
        y = np.ones(16, np.float32)
        for _ in range(5):
            c.all_reduce(y, out=y)
            c.all_reduce(x, out=o)
            c.all_gather(x, out=g)
            c.broadcast(x, root=1, out=o)
        errors = []
        for out, call in ((y, lambda: c.all_reduce(y, out=y)), (o, lambda: c.all_reduce(x, out=o)), (g, lambda: c.all_gather(x, out=g)),
                          (o, lambda: c.broadcast(x, root=1, out=o))):
            out.flags.writeable = False
            try:
                call()
            except ValueError as e:
                errors.append("read-only" in str(e))
            out.flags.writeable = True
        return errors, c.all_reduce(x, out=o).copy(), c.all_gather(x, out=g).copy()

    for errors, ar, ag in simulate(2, fn):
        assert errors == [True, True, True, True]
        np.testing.assert_array_equal(ar, np.full(16, 3, np.float32))
        np.testing.assert_array_equal(ag, np.repeat(np.float32([1, 2]), 16))


@pytest.mark.parametrize("world", [2, 3])
def test_a_mismatch_after_many_cached_calls_raises_on_every_rank(world):
    """Every call still agrees on its header: the plan's header carries each call's number."""
    def fn(c):
        x = np.ones(60, np.float32)
        rs = np.empty(60 // world, np.float32)
        for _ in range(50):
            c.all_reduce(x, out=x)
            c.reduce_scatter(x, out=rs)
            c.barrier()
            c.all_reduce(x, async_op=True).wait()
        if c.rank == world - 1:
            c.all_reduce(x[:32], out=x[:32])  # a different size on one rank
        else:
            c.all_reduce(x, out=x)

    got = simulate(world, fn, return_exceptions=True, timeout=20.0)
    for r, e in enumerate(got):
        assert isinstance(e, MismatchError), f"rank {r}: {e!r}"
        assert "count differs" in str(e) and "#200" in str(e)


def test_queued_and_inline_calls_of_one_plan_keep_their_own_headers():
    """An async call queued with a plan's header, then blocking calls of the same plan."""
    def fn(c):
        x = np.arange(32, dtype=np.float64) * (c.rank + 1)
        outs = [np.empty(32) for _ in range(3)]
        res = []
        for _ in range(20):
            works = [c.all_reduce(x, out=o, async_op=True) for o in outs]
            res.append(c.all_reduce(x, out=outs[0]).copy())  # queued behind them, same plan as the first
            res += [w.wait().copy() for w in works]
        return res

    for res in simulate(2, fn):
        for got in res:
            np.testing.assert_array_equal(got, np.arange(32) * 3.0)


def test_the_plan_cache_is_bounded_and_keeps_no_large_array_alive():
    def fn(c):
        refs = []
        for i in range(3 * MAX_PLANS):
            a = np.full(BIG if i % 2 else 16, c.rank + 1, np.float32)
            o = np.empty_like(a)
            c.all_reduce(a, out=o)
            np.testing.assert_array_equal(o, np.full(a.size, 3, np.float32))
            if i % 2:
                refs.append(weakref.ref(a))
            assert len(c.plans) <= MAX_PLANS
        del a, o
        gc.collect()
        return sum(r() is not None for r in refs)

    assert simulate(2, fn) == [0, 0]


def test_sixty_four_buffers_in_turn_keep_their_plans():
    """A trainer's 64 gradient buckets, called in turn: every call after the first pass
    takes its plan from the cache (32 plans made each call a full plan: 50 us a submit)."""
    def fn(c):
        xs = [np.full(256, c.rank + 1.0, np.float32) for _ in range(64)]
        outs = [np.empty_like(x) for x in xs]
        for x, o in zip(xs, outs):
            c.all_reduce(x, out=o)
        first = dict(c.plans)
        for x, o in zip(xs, outs):
            c.all_reduce(x, out=o)
            np.testing.assert_array_equal(o, np.full(256, 3.0, np.float32))
        return len(first) >= 64 and all(c.plans.get(k) is p for k, p in first.items())

    assert simulate(2, fn) == [True, True]


def test_torch_tensors_reuse_plans_and_see_changes():
    torch = pytest.importorskip("torch")

    def fn(c):
        r = c.rank + 1
        t = torch.full((BIG,), float(r))
        o = torch.empty(BIG)
        got = [c.all_reduce(t, out=o) is o]
        for _ in range(3):
            c.all_reduce(t, out=o)
        got.append(o.clone())
        t.set_(torch.full((BIG,), 5.0 * r))  # new memory, same shape, on the same object
        got.append(c.all_reduce(t, out=o).clone())
        s = torch.full((7,), 1.0 * r)
        c.all_reduce(s, out=s)
        s.set_(torch.full((7,), 10.0 * r))  # a small one: new memory under the same object
        got.append(c.all_reduce(s, out=s).clone())
        return got

    for same, first, second, third in simulate(2, fn):
        assert same
        np.testing.assert_array_equal(first.numpy(), np.full(BIG, 3, np.float32))
        np.testing.assert_array_equal(second.numpy(), np.full(BIG, 15, np.float32))
        np.testing.assert_array_equal(third.numpy(), np.full(7, 30, np.float32))


def test_cached_calls_under_mpirun_heap_ordinary_and_mpi_baseline(mpi):
    """600 cached calls on heap arrays (direct path), ordinary arrays and the MPI
    baseline match numpy; then a mismatched call raises on every rank, on each."""
    import json
    proc = mpi(2, "plan_check.py", timeout=180)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    for res in lines:
        assert res["nfail"] == 0, res["failures"]
        assert sorted(res["raised"]) == ["heap", "mpi", "ordinary"]
        assert res["shapes"][0] > 0 and res["shapes"][1] == 0, res["shapes"]  # alloc forgets them
        for msg in res["raised"].values():
            assert "count differs (rank 0: 24, rank 1: 12)" in msg and "#600" in msg, msg


def test_large_tensors_get_one_view_that_keeps_nothing_alive():
    """A CPU tensor over SMALL_BYTES is held weakly; its plan hands back one ownerless
    view every call (so views keyed by object, like the direct path's, are found again),
    which sees the tensor's writes, and lets the tensor die."""
    torch = pytest.importorskip("torch")

    def fn(c):
        r = c.rank + 1
        t = torch.full((2 * BIG,), float(r), dtype=torch.bfloat16)  # 2 bytes an element: 2 * BIG to be large
        o = torch.empty(2 * BIG, dtype=torch.bfloat16)
        flats = set()
        for step in range(4):
            t.fill_(float(r * (step + 1)))  # written through torch, read through the view
            c.all_reduce(t, out=o)
            assert torch.equal(o, torch.full((2 * BIG,), 3.0 * (step + 1), dtype=torch.bfloat16)), step
            plan = next(p for p in c.plans.values() if p.xref is not None and p.xref() is t)
            flats.add(id(plan.xflat))
        ref = weakref.ref(t)
        del t, plan
        gc.collect()
        return len(flats), ref() is None

    assert simulate(2, fn) == [(1, True), (1, True)]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("n", [24, BIG])
def test_fresh_views_take_the_plan_of_arrays_just_like_them(world, n):
    """A new view x[:] (or reshape) of the same buffers on every call runs the plan its
    first call made (found by address, shape, dtype and flags, not by object), with
    results exact; another address, shape, dtype, or a read-only out, plans anew."""
    def fn(c):
        r = c.rank + 1
        x = np.arange(n * world, dtype=np.float32) * r
        out = np.empty(n * world, np.float32)
        piece = np.full(n, float(r), np.float32)
        gathered = np.empty(n * world, np.float32)
        seg = np.empty(n, np.float32)
        buf = np.zeros(n, np.float32)
        seen, got = {}, []
        for step in range(4):
            x[:] = np.arange(n * world) * r * (step + 1)
            got.append(c.all_reduce(x[:], out=out[:]).copy())
            seen.setdefault("ar", []).append(id(c.last))
            got.append(c.reduce_scatter(x.reshape(world, n), out=seg[:]).copy())
            seen.setdefault("rs", []).append(id(c.last))
            got.append(c.all_gather(piece[:], out=gathered[:]).copy())
            seen.setdefault("ag", []).append(id(c.last))
            if c.rank == 1:
                buf[:] = step + 1
            got.append(c.broadcast(buf[:], root=1, out=buf[:]).copy())
            seen.setdefault("bc", []).append(id(c.last))
        first = id(c.last)
        other = c.all_reduce(x[1:], out=out[1:]).copy()  # another address and size: its own plan
        assert id(c.last) != first
        half = c.all_reduce(x.view(np.int32)[:2], out=out.view(np.int32)[:2], op="max").copy()
        ro = out[:]
        ro.flags.writeable = False
        try:
            c.all_reduce(x[:], out=ro)
            refused = None
        except ValueError as e:
            refused = str(e)
        c.all_reduce(x[:1], out=out[:1])  # every rank makes one call in place of the refused one
        return seen, got, other, half, refused

    s = sum(range(1, world + 1))
    for seen, got, other, half, refused in simulate(world, fn):
        assert all(len(set(ids)) == 1 for ids in seen.values()), seen  # one plan, every call
        for step in range(4):
            full = np.arange(n * world, dtype=np.float32) * s * (step + 1)
            ar, rs, ag, bc = got[4 * step:4 * step + 4]
            np.testing.assert_array_equal(ar, full)
            assert rs.size == n
            np.testing.assert_array_equal(ag, np.repeat(np.arange(1, world + 1, dtype=np.float32), n))
            np.testing.assert_array_equal(bc, np.full(n, step + 1, np.float32))
        np.testing.assert_array_equal(other, np.arange(1, n * world, dtype=np.float32) * s * 4)
        want = np.max([(np.arange(n * world, dtype=np.float32) * (q + 1) * 4).view(np.int32)[:2]
                       for q in range(world)], axis=0)
        np.testing.assert_array_equal(half, want)
        assert refused is not None and "read-only" in refused


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("n", [24, BIG])
def test_fresh_tensor_views_take_the_plan_of_tensors_just_like_them(world, n):
    """CPU tensors as trainers pass them: a new view t[:] of the same memory on every call,
    and tensors made anew, run the plan the first call made (exact results); another
    address plans anew, a tensor that needs grad takes the full path; and no plan keeps a
    tensor alive, small or large (a heap pool takes a block back when its tensor dies)."""
    torch = pytest.importorskip("torch")

    def fn(c):
        r = c.rank + 1
        x = torch.arange(n * world, dtype=torch.float32) * r
        out = torch.empty(n * world)
        piece = torch.full((n,), float(r))
        gathered = torch.empty(n * world)
        seg = torch.empty(n)
        buf = torch.zeros(n, dtype=torch.bfloat16)
        seen, got = {}, []
        for step in range(4):
            x.copy_(torch.arange(n * world) * r * (step + 1))
            got.append(c.all_reduce(x[:], out=out[:]).clone())
            seen.setdefault("ar", []).append(id(c.last))
            got.append(c.reduce_scatter(x.view(world, n), out=seg[:]).clone())
            seen.setdefault("rs", []).append(id(c.last))
            got.append(c.all_gather(piece[:], out=gathered[:]).clone())
            seen.setdefault("ag", []).append(id(c.last))
            if c.rank == 1:
                buf.fill_(step + 1)
            got.append(c.broadcast(buf[:], root=1, out=buf[:]).clone())
            seen.setdefault("bc", []).append(id(c.last))
        first = id(c.last)
        other = c.all_reduce(x[1:], out=out[1:]).clone()  # another address and size: its own plan
        assert id(c.last) != first
        g = torch.full((n,), float(r), requires_grad=True)
        with torch.no_grad():
            c.all_reduce(g, out=g)
        graded = g.detach().clone()
        refs = []
        for step in range(3):  # tensors made anew, small and large: none outlives its call
            a = torch.full((n,), float(r * (step + 1)))
            refs.append(weakref.ref(a))
            c.all_reduce(a, out=a)
            got.append(a.clone())
            del a
        gc.collect()
        alive = sum(ref() is not None for ref in refs)
        z = torch.ones(n, dtype=torch.complex64)
        c.all_reduce(z[:], out=z[:])
        try:  # a lazy conjugate at the same address is no tensor like z: refused, as on a first call
            c.all_reduce(z.conj(), out=z.conj())
            conj = None
        except RuntimeError as e:
            conj = str(e)
        return seen, got, other, graded, alive, conj

    s = sum(range(1, world + 1))
    for seen, got, other, graded, alive, conj in simulate(world, fn):
        assert all(len(set(ids)) == 1 for ids in seen.values()), seen  # one plan, every call
        for step in range(4):
            full = np.arange(n * world, dtype=np.float32) * s * (step + 1)
            ar, rs, ag, bc = got[4 * step:4 * step + 4]
            np.testing.assert_array_equal(ar.numpy(), full)
            assert rs.numel() == n
            np.testing.assert_array_equal(ag.numpy(), np.repeat(np.arange(1, world + 1, dtype=np.float32), n))
            np.testing.assert_array_equal(bc.float().numpy(), np.full(n, step + 1, np.float32))
        np.testing.assert_array_equal(other.numpy(), np.arange(1, n * world, dtype=np.float32) * s * 4)
        np.testing.assert_array_equal(graded.numpy(), np.full(n, s, np.float32))
        for step in range(3):
            np.testing.assert_array_equal(got[16 + step].numpy(), np.full(n, s * (step + 1), np.float32))
        assert alive == 0
        assert conj is not None and "conjugate" in conj, conj


def test_a_plan_found_by_its_arrays_serves_new_arrays_where_old_ones_were():
    """Arrays made anew each call (the allocator often hands the same address back) and
    in-place calls through a second view of the same memory: exact every time; the
    arrays' entries keep no large array alive (tests/mpi/plan_check.py: alloc empties them)."""
    def fn(c):
        r = c.rank + 1
        got = []
        for step in range(6):
            a = np.full(BIG, float(r * (step + 1)), np.float32)
            o = np.empty(BIG, np.float32)
            got.append(c.all_reduce(a, out=o)[:3].copy())
            del a, o
            y = np.full(40, float(r + step), np.float64)
            c.all_reduce(y, out=y)  # in place, the same object
            got.append(y[:2].copy())
            c.all_reduce(y[:], out=y[:])  # in place, two views of the same memory
            got.append(y[:2].copy())
        gc.collect()
        held = [p.xa.obj for p in c.shapes.values() if p.xa is not None and p.xa.flat.nbytes > SMALL_BYTES]
        return got, len(c.shapes), held

    for got, shapes, held in simulate(2, fn):
        for step in range(6):
            np.testing.assert_array_equal(got[3 * step], np.full(3, 3 * (step + 1), np.float32))
            once = 2 * step + 3
            np.testing.assert_array_equal(got[3 * step + 1], np.full(2, once, np.float64))
            np.testing.assert_array_equal(got[3 * step + 2], np.full(2, 2 * once, np.float64))
        assert 0 < shapes <= MAX_PLANS and held == []
