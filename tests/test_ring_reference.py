"""collectives/gpu_ring/reference.py against the host ring itself (collectives.simulate).

The host build's matrix (tests/test_ring_host.py) compares the kernels with this
numpy model of the ring's order; here the model meets the real ring code on simulated
ranks (small_bytes=0, so no call takes the header road, and a tiny chunk so segments
go in several chunks), for every dtype and op, with NaN, infinities, signed zeros
and integer extremes in the inputs: equal bit for bit (NaN: positions), so a kernel
equal to the model is equal to today's ring. A model that swapped the operands or
rounded once at the end instead of per hop is shown to differ.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from collectives import simulate
from collectives.dtypes import DTYPES, KERNEL_DTYPES
from collectives.gpu_ring import reference
from collectives.gpu_ring.plan import split_counts

sys.path.append(str(Path(__file__).resolve().parent.parent / "bench"))
from ring_on_host import operand  # noqa: E402

OPS = ("sum", "prod", "max", "min")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf and NaN in the inputs are meant


def _ring(n, fn):
    return simulate(n, fn, small_bytes=0, chunk_bytes=64, timeout=60)


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("name", list(KERNEL_DTYPES))  # the dtypes the kernels cover
def test_the_model_is_the_host_ring_for_every_dtype_and_op(n, name):
    dt = DTYPES[name][0]
    count = 203
    for k, op in enumerate(OPS):
        xs = [operand(dt, count, 7 * r + k + n) for r in range(n)]
        got = _ring(n, lambda c: c.all_reduce(xs[c.rank], op=op))
        counts = split_counts(count, n, max(1, 64 // dt.itemsize))  # the segments dispatch gives the ring
        want = reference.expected("all_reduce", xs, counts, op)
        for r in range(n):
            assert reference.same(np.asarray(got[r]), want[r]) is None, (name, op, r)
        rs_counts = [40, 0, 77, 86][:n - 1] + [count - sum([40, 0, 77, 86][:n - 1])]
        got = _ring(n, lambda c: c.reduce_scatter(xs[c.rank], op=op, counts=rs_counts))
        want = reference.expected("reduce_scatter", xs, rs_counts, op)
        for r in range(n):
            assert reference.same(np.asarray(got[r]), want[r]) is None, (name, op, "rs", r)


def test_the_model_all_gathers_every_piece_in_rank_order():
    n, counts = 4, [5, 0, 9, 3]
    xs = [operand(np.float32, counts[r], r) for r in range(n)]
    got = _ring(n, lambda c: c.all_gather(xs[c.rank], counts=counts))
    for r in range(n):
        assert reference.same(np.asarray(got[r]), reference.expected("all_gather", xs, counts)[r]) is None


def test_a_wrong_model_differs_from_the_ring():
    """The check can fail: operands swapped, or one rounding at the end, is not the ring."""
    n, count = 5, 4001
    xs = [operand(np.float16, count, r) for r in range(n)]
    counts = split_counts(count, n, 32)
    ring = _ring(n, lambda c: c.all_reduce(xs[c.rank], op="sum"))[0]
    with np.errstate(all="ignore"):
        once = np.sum([x.astype(np.float32) for x in xs], axis=0).astype(np.float16)
    assert reference.same(np.asarray(ring), once) is not None
    # operands swapped: max(+0, -0) keeps the second operand's sign, so the order shows
    zs = [np.array([0.0, -0.0, -0.0, 0.0] * 8, np.float32) * (1 if r % 2 else -1) for r in range(3)]
    zc = split_counts(32, 3, 16)  # as dispatch cuts it
    ring = _ring(3, lambda c: c.all_reduce(zs[c.rank], op="max"))[0]
    assert reference.same(np.asarray(ring), reference.expected("all_reduce", zs, zc, "max")[0]) is None
    swapped = reference.op2
    try:
        reference.op2 = lambda op, a, b: swapped(op, b, a)
        wrong = reference.expected("all_reduce", zs, zc, "max")[0]
    finally:
        reference.op2 = swapped
    assert np.asarray(ring).tobytes() != wrong.tobytes()
