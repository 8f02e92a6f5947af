"""The ring on simulated ranks (threads, in-process transport), world sizes 1 to 8.

Inputs are small integers, so every sum is exact and results are compared
bit for bit with numpy.
"""
import threading
import time

import numpy as np
import pytest

from collectives import CollectiveTimeout, Communicator, MismatchError, simulate
from collectives.dtypes import KERNEL_DTYPES, to_dtype
from collectives.transport import Fabric
from inputs import data

WORLDS = range(1, 9)
COUNTS = [0, 1, 2, 5, 13, 64, 101, 1031]
TINY = dict(chunk_bytes=16, small_bytes=0)  # every path through the ring, many chunks


def reference(world, count, dtype, op):
    xs = np.stack([data(count, r, np.float64, op) for r in range(world)]) if count else np.zeros((world, 0))
    e = {"sum": xs.sum(0), "prod": xs.prod(0), "max": xs.max(0, initial=-1e9), "min": xs.min(0, initial=1e9),
         "avg": xs.sum(0) / world}[op]
    if op == "avg" and np.dtype(dtype).kind == "i":
        e = np.trunc(xs.sum(0) / world)
    if op == "avg" and np.dtype(dtype).kind != "i":
        e = xs.sum(0)  # the inputs are avg_input's: world * data, so x / world is exact in any order
    return e.astype(dtype)


def avg_input(count, rank, dtype, op, world):
    """data(), times the world size for a floating avg: avg divides floats by N before
    the sum (as NCCL does), and these quotients are exact, so any order gives the same bits."""
    x = data(count, rank, dtype, op)
    if op == "avg" and np.dtype(dtype).kind != "i":
        x = (x.astype(np.float64) * world).astype(dtype)
    return x


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("kw", [TINY, {}], ids=["tiny-chunks", "default"])
def test_all_reduce_every_count(world, kw):
    for count in COUNTS:
        want = reference(world, count, np.float32, "sum")
        got = simulate(world, lambda c: c.all_reduce(data(count, c.rank, np.float32)), **kw)
        assert all(same(g, want) for g in got), count
        # in place returns out itself
        got = simulate(world, lambda c: (lambda y: (c.all_reduce(y, out=y) is y, y))(data(count, c.rank, np.float32)), **kw)
        assert all(flag and same(y, want) for flag, y in got), count


@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
@pytest.mark.parametrize("op", ["sum", "avg", "max", "min", "prod"])
def test_all_reduce_dtypes_and_ops(dtype, op):
    dt = to_dtype(dtype)
    for world in (1, 3, 4, 7):
        for count in (0, 3, 97):
            want = reference(world, count, dt, op)
            for kw in (TINY, {}):
                got = simulate(world, lambda c: c.all_reduce(avg_input(count, c.rank, dt, op, world), op=op), **kw)
                assert all(same(g, want) for g in got), (world, count, kw)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
@pytest.mark.parametrize("kw", [TINY, {}], ids=["ring", "small-path"])
def test_reduce_scatter_even_and_uneven(world, dtype, kw):
    dt = to_dtype(dtype)
    for count in COUNTS:
        full = reference(world, count, dt, "sum")
        splits = [None] if count % world == 0 else []
        rng = np.random.default_rng(count + world)
        cuts = np.sort(rng.integers(0, count + 1, world - 1))
        splits.append(list(np.diff(np.concatenate([[0], cuts, [count]])).astype(int)))
        for counts in splits:
            cts = counts or [count // world] * world

            def fn(c):
                x = data(count, c.rank, dt)
                y = c.reduce_scatter(x, counts=counts)
                assert same(x, data(count, c.rank, dt)), "input modified"
                return y
            got = simulate(world, fn, **kw)
            offs = np.concatenate([[0], np.cumsum(cts)])
            for r in range(world):
                assert same(got[r], full[offs[r]:offs[r + 1]]), (count, cts, r)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("kw", [TINY, {}], ids=["ring", "small-path"])
def test_all_gather_even_and_uneven(world, kw):
    for base in (0, 1, 7, 100):
        for counts in ([base] * world, [base + (r * 3) % 5 for r in range(world)], [0] * (world - 1) + [base]):
            want = np.concatenate([data(counts[r], r, np.float32) for r in range(world)])
            even = len(set(counts)) == 1
            got = simulate(world, lambda c: c.all_gather(data(counts[c.rank], c.rank, np.float32),
                                                       counts=None if even else counts), **kw)
            assert all(same(g, want) for g in got), counts


@pytest.mark.parametrize("kw", [TINY, {}], ids=["ring", "small-path"])
def test_all_gather_moves_bits_not_values(kw):
    """-0.0 and NaN payloads arrive bit for bit (the small path reduces raw bytes with max)."""
    pieces = [np.array([-0.0, np.nan, 1.5], np.float32), np.array([0.0, -np.inf, -0.0], np.float32),
              np.frombuffer(np.array([0x7FC00001, 0xFF800000, 0x80000000], np.uint32).tobytes(), np.float32)]
    got = simulate(3, lambda c: c.all_gather(pieces[c.rank]), **kw)
    want = np.concatenate(pieces)
    assert all(g.tobytes() == want.tobytes() for g in got)


@pytest.mark.parametrize("world", WORLDS)
def test_broadcast_every_root(world):
    for root in range(world):
        for count in (0, 1, 50):
            want = data(count, root, np.float64)
            got = simulate(world, lambda c: c.broadcast(data(count, c.rank, np.float64), root=root), **TINY)
            assert all(same(g, want) for g in got)
            got = simulate(world, lambda c: (lambda y: (c.broadcast(y, root=root, out=y), y)[1])(
                data(count, c.rank, np.float64)), **TINY)
            assert all(same(g, want) for g in got)


def test_multidimensional_arrays_keep_their_shape():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = simulate(3, lambda c: c.all_reduce(x))
    assert got[0].shape == (2, 3, 4) and np.array_equal(got[0], 3 * x)
    got = simulate(3, lambda c: c.reduce_scatter(x))
    assert np.array_equal(got[1], 3 * x.reshape(-1)[8:16])


def test_async_work_runs_in_call_order_and_overlaps():
    def fn(c):
        x = data(5003, c.rank, np.float32)
        works = [c.all_reduce(x, async_op=True), c.reduce_scatter(np.tile(x, 4), async_op=True),
                 c.all_gather(x, async_op=True)]
        sync = c.all_reduce(x)  # queued behind the async ones, still correct
        results = [w.wait() for w in works]
        assert all(w.is_completed() for w in works)
        with pytest.raises(RuntimeError, match="twice"):
            works[0].wait()
        return results, sync

    got = simulate(4, fn, chunk_bytes=1024)
    want = reference(4, 5003, np.float32, "sum")
    for r, (res, sync) in enumerate(got):
        assert same(res[0], want) and same(sync, want)
        assert same(res[1], np.tile(want, 4)[r * 5003:(r + 1) * 5003])
        assert same(res[2], np.concatenate([data(5003, q, np.float32) for q in range(4)]))


def test_async_lets_the_caller_compute_meanwhile():
    """While rank 1 is late, rank 0's async all-reduce is pending and rank 0 keeps working."""
    fabric = Fabric(2)
    log = {}

    def rank0():
        c = Communicator(transport=fabric.transport(0), timeout=10)
        w = c.all_reduce(np.ones(1000, np.float32), async_op=True)
        log["pending_while_computing"] = not w.is_completed()
        log["computed"] = float(np.sum(np.arange(1000)))
        log["result"] = w.wait()
        c.close()

    def rank1():
        c = Communicator(transport=fabric.transport(1), timeout=10)
        time.sleep(0.3)
        c.all_reduce(np.ones(1000, np.float32))
        c.close()

    ts = [threading.Thread(target=rank0), threading.Thread(target=rank1)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert log["pending_while_computing"] and log["computed"] == 499500.0
    assert np.array_equal(log["result"], np.full(1000, 2, np.float32))


@pytest.mark.parametrize("world", [2, 3, 5, 8])
def test_mismatched_count_fails_on_every_rank(world):
    def fn(c):
        return c.all_reduce(np.ones(100 + (c.rank == world - 1), np.float32))

    got = simulate(world, fn, return_exceptions=True, timeout=10)
    for r, e in enumerate(got):
        assert isinstance(e, MismatchError), (r, e)
        assert f"rank {r}:" in str(e) and "count differs" in str(e) and f"rank {world - 1}: 101" in str(e)


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("case", ["all_reduce", "reduce_scatter", "all_gather"])
def test_mismatch_on_the_ring_path_cancels_what_was_posted(world, case):
    """Both ranks on the ring: data is posted before the header verdict. Every rank
    raises the MismatchError, no receive is left posted on the fabric, and the
    same fabric then runs a correct collective."""
    from collectives.transport import Fabric
    fabric = Fabric(world)
    n = 1 << 15  # 128 KiB of float32: past the small paths, several 16 KiB chunks
    errors, results = [None] * world, [None] * world

    def run(rank):
        c = Communicator(transport=fabric.transport(rank), timeout=10, chunk_bytes=16384)
        try:
            k = n + (64 if rank == world - 1 else 0)
            if case == "all_reduce":
                c.all_reduce(np.ones(k, np.float32))
            elif case == "reduce_scatter":
                c.reduce_scatter(np.ones(k * world, np.float32))
            else:
                c.all_gather(np.ones(k, np.float32))
        except MismatchError as e:
            errors[rank] = e
        c2 = Communicator(transport=fabric.transport(rank), timeout=10)
        results[rank] = c2.all_reduce(np.full(n, rank + 1.0, np.float32))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for r, e in enumerate(errors):
        assert isinstance(e, MismatchError) and "count differs" in str(e), (r, e)
    # what the broken communicators posted was cancelled; only their sends may linger
    assert not any(fabric.posted.values()), {k: len(v) for k, v in fabric.posted.items() if v}
    # the leftover sends carry the ring's tags, which a fresh agreement never matches
    for r in range(world):
        assert np.array_equal(results[r], np.full(n, world * (world + 1) / 2, np.float32)), r


def test_mismatched_order_and_small_vs_ring_path():
    def fn(c):
        if c.rank == 0:
            return c.all_reduce(np.ones(10, np.float32))  # small path
        return c.all_reduce(np.ones(100000, np.float32))  # ring path

    got = simulate(3, fn, return_exceptions=True, timeout=10)
    assert all(isinstance(e, MismatchError) for e in got), got

    def fn2(c):
        return c.broadcast(np.ones(10)) if c.rank == 1 else c.barrier()
    got = simulate(3, fn2, return_exceptions=True, timeout=10)
    assert all(isinstance(e, MismatchError) and "collective differs" in str(e) for e in got), got


@pytest.mark.parametrize("world", [2, 3, 4])
def test_header_messages_always_fit_their_receive(world):
    """A header message carrying a small payload meets a barrier's receive, and a
    rank built with a larger small_bytes sends a payload past the others' limit:
    both are mismatches on every rank, never a truncated receive (which Open MPI
    may write past the buffer)."""
    from collectives.safety.agree import MAX_SMALL_BYTES
    got = simulate(world, lambda c: c.all_reduce(np.ones(1000, np.float32)) if c.rank == 0 else c.barrier(),
                   return_exceptions=True, timeout=10)
    assert all(isinstance(e, MismatchError) and "collective differs" in str(e) for e in got), got

    from collectives.transport import Fabric
    fabric = Fabric(world)
    errors = [None] * world

    def run(rank):
        c = Communicator(transport=fabric.transport(rank), timeout=10,
                         small_bytes=MAX_SMALL_BYTES if rank == 0 else 1024)
        try:
            c.all_reduce(np.ones(MAX_SMALL_BYTES // 4, np.float32))  # rank 0: all of it in one header
        except Exception as e:
            errors[rank] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert all(isinstance(e, MismatchError) and "small differs" in str(e) for e in errors), errors


def test_small_bytes_is_capped():
    from collectives.safety.agree import MAX_SMALL_BYTES
    from collectives.transport import Fabric
    with pytest.raises(ValueError, match="small_bytes"):
        Communicator(transport=Fabric(1).transport(0), small_bytes=MAX_SMALL_BYTES + 1)


def test_timeout_names_rank_peer_and_step():
    def fn(c):
        if c.rank == 1:
            return None  # never calls
        return c.all_reduce(np.ones(10, np.float32))

    got = simulate(2, fn, return_exceptions=True, timeout=0.3)
    assert isinstance(got[0], CollectiveTimeout)
    assert "rank 0:" in str(got[0]) and "rank 1" in str(got[0]) and "agreement" in str(got[0])


@pytest.mark.parametrize("case", ["all_reduce", "reduce_scatter", "all_gather"])
def test_absent_peer_on_the_ring_path_times_out_by_name(case):
    """Rank 1 never calls; rank 0 has already posted its first ring data when the
    header check waits: it still times out at the deadline, naming rank 1."""
    n = 1 << 16

    def fn(c):
        if c.rank == 1:
            return None
        x = np.ones(n, np.float32)
        return getattr(c, case)(x)

    t0 = time.monotonic()
    got = simulate(2, fn, return_exceptions=True, timeout=0.5, chunk_bytes=16384)
    assert time.monotonic() - t0 < 10
    assert isinstance(got[0], CollectiveTimeout), got[0]
    assert "rank 0:" in str(got[0]) and "rank 1 never completed" in str(got[0]), str(got[0])
    assert "agreement" in str(got[0]) and "did rank 1 call this collective?" in str(got[0])


def test_bad_arguments_raise_before_any_byte_moves():
    fabric = Fabric(2)
    c = Communicator(transport=fabric.transport(0), timeout=0.5)
    x = np.ones(10, np.float32)
    with pytest.raises(TypeError, match="numpy or cupy"):
        c.all_reduce([1.0, 2.0])
    with pytest.raises(TypeError, match="unsupported dtype"):
        c.all_reduce(np.ones(4, np.float128))
    with pytest.raises(TypeError, match="unsupported dtype"):
        c.all_reduce(np.ones(4, "U1"))
    with pytest.raises(TypeError, match="rank 0: all_reduce: op 'max' does not apply to dtype complex64"):
        c.all_reduce(np.ones(4, np.complex64), op="max")
    with pytest.raises(ValueError, match="C-contiguous"):
        c.all_reduce(np.ones((4, 4), np.float32)[:, 1])
    with pytest.raises(ValueError, match="unknown op"):
        c.all_reduce(x, op="mean")
    with pytest.raises(ValueError, match="elements, expected 10"):
        c.all_reduce(x, out=np.empty(9, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        c.all_reduce(x, out=np.empty(10, np.float64))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.empty(10, np.float32)
        ro.flags.writeable = False
        c.all_reduce(x, out=ro)
    with pytest.raises(ValueError, match="not divisible"):
        c.reduce_scatter(np.ones(11, np.float32))
    with pytest.raises(ValueError, match=">= 0"):
        c.reduce_scatter(x, counts=[12, -2])
    with pytest.raises(ValueError, match="add up to"):
        c.reduce_scatter(x, counts=[5, 4])
    with pytest.raises(ValueError, match="2 entries|entries, world size"):
        c.reduce_scatter(x, counts=[10])
    with pytest.raises(ValueError, match="counts\\[0\\]"):
        c.all_gather(x, counts=[3, 3])
    with pytest.raises(TypeError, match="counts must be integers, got 2.5"):
        c.reduce_scatter(x, counts=[2.5, 7.5])  # not quietly [2, 7]
    with pytest.raises(TypeError, match="sequence of integers"):
        c.all_gather(x, counts=10)
    with pytest.raises(ValueError, match="overlap"):
        c.reduce_scatter(x, out=x[:5])
    with pytest.raises(ValueError, match="root"):
        c.broadcast(x, root=2)
    with pytest.raises(ValueError, match="algorithm"):
        Communicator(transport=fabric.transport(1), algorithm="tree")
    # nothing was sent: the wire is empty
    assert not any(fabric.messages.values())
    c.close()


@pytest.mark.parametrize("case", ["all_reduce", "all_gather"])
def test_a_timeout_mid_ring_leaves_no_receive_posted(case):
    """Rank 1 stops forwarding after the header verdict (its sends are dropped);
    every rank that times out has cancelled all the receives it posted, so a
    late message could not land in a buffer the caller got back."""
    from collectives.host.ring import TAG_DATA
    from collectives.transport import Fabric
    world, fabric = 3, Fabric(3)
    errors = [None] * world

    def run(rank):
        c = Communicator(transport=fabric.transport(rank), timeout=0.5, chunk_bytes=1024, small_bytes=0)
        if rank == 1:
            sent = []

            def fault(kind, peer, tag):  # its first 4 data chunks go, then it falls silent
                if tag != TAG_DATA:
                    return False
                sent.append(tag)
                return len(sent) > 4
            c.transport.fault = fault
        try:
            getattr(c, case)(np.ones(3 << 12, np.float32))
        except CollectiveTimeout as e:
            errors[rank] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert isinstance(errors[2], CollectiveTimeout) and "from rank 1" in str(errors[2]), errors
    left = {k: len(v) for k, v in fabric.posted.items() if v}
    assert not left, left


def test_a_closed_communicator_refuses_every_call():
    """After close(), blocking and async calls raise a clear error instead of
    reaching a freed MPI communicator (MPI_ERR_COMM) or, on one rank, working."""
    from collectives.transport import Fabric
    c = Communicator(transport=Fabric(1).transport(0))
    c.close()
    for call in (lambda: c.all_reduce(np.ones(4)), lambda: c.all_reduce(np.ones(4), async_op=True),
                 lambda: c.barrier(), lambda: c.broadcast(np.ones(4))):
        with pytest.raises(RuntimeError, match="communicator is closed"):
            call()
    c.close()  # closing twice is harmless


@pytest.mark.parametrize("traced", [False, True])
def test_two_rank_all_gather_splits_pieces_past_the_message_limit(monkeypatch, traced):
    """One MPI message must stay under 2 GiB (a 2 GiB + 4 KiB message fails with
    MPI_ERR_ARG here), so the two-rank exchange sends a larger piece as several
    messages. With the limit made tiny: uneven pieces, one of them empty."""
    from collectives.host import ring
    from collectives.teach.trace import Tracer
    monkeypatch.setattr(ring, "MAX_MESSAGE_BYTES", 4096)
    counts = [2500, 0]
    tracer = Tracer() if traced else None

    def fn(c):
        x = np.arange(counts[c.rank], dtype=np.float64) + 1000 * c.rank
        return c.all_gather(x, counts=counts)

    got = simulate(2, fn, tracer=tracer, chunk_bytes=4096, small_bytes=0)
    want = np.concatenate([np.arange(k, dtype=np.float64) + 1000 * q for q, k in enumerate(counts)])
    assert all(np.array_equal(g, want) for g in got)
    if traced:
        recvs = [e for e in tracer.events if e["action"] == "recv" and e["rank"] == 1]
        assert [e["count"] for e in recvs] == [512, 512, 512, 512, 452]  # 4096-byte messages of float64


def test_chunk_bytes_is_capped_at_the_message_limit():
    from collectives.host import ring
    from collectives.transport import Fabric
    with pytest.raises(ValueError, match="chunk_bytes"):
        Communicator(transport=Fabric(1).transport(0), chunk_bytes=ring.MAX_MESSAGE_BYTES + 1)


def test_simulate_reports_a_constructor_error():
    with pytest.raises(ValueError, match="window"):
        simulate(2, lambda c: c.barrier(), window=0)
