"""The kernels' schedule, in plain Python: steps, channel parts, rounds and bytes moved.

csrc/ring/ring.cu runs, per channel, rounds of steps; this module states the same
arithmetic so the host can size launches, explain.py can say what each block did, and
tests can check the kernels' traffic against formulas:

- step t of rank r (:func:`step`) is the host ring's (collectives/host/schedule.py):
  reduce-scatter sends segment r-t-1 and reduces what it receives, op(mine, incoming);
  the all-gather forwards segment r-t; the all-reduce runs 2n-1 steps, the two in one.
- channel c of nch takes part c of every segment (:func:`part`, whole 16-byte granules);
  round j moves slice j (at most slot_bytes) of the step's segment part (:func:`rounds`).
- :func:`traffic` counts the bytes a rank reads and writes: the minimal ones (input read
  once, output written once) and the actual ones (every slot write and read too).

The segment split and its offsets are the host ring's own (collectives/host/schedule.py):
the kernels split a buffer exactly as the host ring does.
"""
from __future__ import annotations

from typing import NamedTuple

from ..host.schedule import offsets, split_counts  # noqa: F401  (the kernels' split is the host ring's)

COLLECTIVES = ("reduce_scatter", "all_gather", "all_reduce")


class Step(NamedTuple):
    seg: int
    recv: bool
    send: bool
    reduce: bool
    gather: bool  # moves final data (the all-gather, or the all-reduce's second half)
    final: bool   # the reduce that finishes this rank's segment


def nsteps(collective: str, world: int) -> int:
    """Steps of one round: n for a reduce-scatter or all-gather, 2n-1 for an all-reduce."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    return 2 * world - 1 if collective == "all_reduce" else world


def step(collective: str, rank: int, world: int, t: int) -> Step:
    """Step t of ``collective`` on ``rank`` (rz_step in ring.cu)."""
    last = nsteps(collective, world) - 1
    if not 0 <= t <= last:
        raise ValueError(f"step {t} outside 0..{last}")
    gather = collective == "all_gather" or (collective == "all_reduce" and t >= world)
    k = t - (world - 1) if collective == "all_reduce" and t >= world else t
    seg = (rank - k if gather else rank - k - 1) % world
    return Step(seg=seg, recv=t > 0, send=t < last, reduce=not gather and t > 0, gather=gather,
                final=not gather and t == world - 1)


def part(offs: list[int], s: int, c: int, nch: int, granule: int) -> tuple[int, int]:
    """Elements [lo, hi) of segment s that channel c of nch serves (rz_part)."""
    a, units = offs[s], (offs[s + 1] - offs[s]) // granule
    lo = a + units * c // nch * granule
    hi = offs[s + 1] if c == nch - 1 else a + units * (c + 1) // nch * granule
    return lo, hi


def rounds(offs: list[int], c: int, nch: int, granule: int, slice_elems: int) -> int:
    """Rounds channel c runs: its largest segment part, in slices."""
    return max(-(-(hi - lo) // slice_elems) for lo, hi in (part(offs, s, c, nch, granule) for s in range(len(offs) - 1)))


def messages(collective: str, offs: list[int], nch: int, itemsize: int, slot_bytes: int) -> list[int]:
    """Messages each channel sends to its right neighbour in one call (every rank the same):
    how far the never-reset counters move."""
    world = len(offs) - 1
    g = 16 // itemsize
    per_round = nsteps(collective, world) - 1
    return [rounds(offs, c, nch, g, slot_bytes // itemsize) * per_round for c in range(nch)]


# Bytes per step kind, as multiples of the slice: (reads + writes) with slots, then direct.
def _step_bytes(collective: str, st: Step, t: int, direct: bool, in_place: bool) -> int:
    if not st.gather:
        if t == 0:
            return 2  # read x, write the right slot
        return 4 if st.final and collective == "all_reduce" else 3  # read x and slot; write slot/out (and both)
    if t == 0:  # the all-gather's own piece: read x, send it, and copy it to out unless in place
        return 2 + (not in_place)
    if direct:
        return 2 if st.send else 0  # it arrived in out: read it once more to forward it
    return 3 if st.send else 2  # read the slot, write out (and the right slot)


def _small_bytes(collective: str, kernel: str, total: int, own: int, world: int) -> int:
    """Reads + writes of a one-/two-shot kernel (ring_small.cu): staging the input, then folding."""
    mine = own if collective == "all_gather" else total
    stage = 2 * mine  # read the input, write it to this rank's staging area
    if kernel == "twoshot":  # fold own segment from n stages, publish it, copy every other one
        return stage + world * own + 2 * own + 2 * (total - own)
    if collective == "all_reduce":
        return stage + world * total + total
    if collective == "reduce_scatter":
        return stage + world * own + own
    return stage + 2 * total  # all-gather: read every staged piece, write out


def traffic(collective: str, counts: list[int], rank: int, itemsize: int, direct: bool = False,
            in_place: bool = False, kernel: str = "ring") -> tuple[int, int]:
    """(minimal, actual) bytes rank ``rank`` reads plus writes in one call.

    Args:
      collective: reduce_scatter, all_gather or all_reduce.
      counts: elements per segment.
      rank: the rank.
      itemsize: bytes per element.
      direct: the all-gather data goes straight into the neighbour's output.
      in_place: the all-gather's input is already its segment of the output.
      kernel: "ring", or the small kernel that ran ("oneshot", "twoshot"; see _small_bytes).

    Minimal: the input read once and the output written once. Actual: what the kernel's
    steps read and write, slots included; for even segments of u bytes that is
    (6n-4)u for an all-reduce, (5n-4)u direct; (3n-1)u for a reduce-scatter and an
    out-of-place all-gather, (2n-1)u direct (tests/test_ring_plan.py checks both).
    """
    world = len(counts)
    total = sum(counts) * itemsize
    own = counts[rank] * itemsize
    minimal = {"all_reduce": 2 * total, "reduce_scatter": total + own,
               "all_gather": own + (total - own if in_place else total)}[collective]
    if kernel != "ring":
        return minimal, _small_bytes(collective, kernel, total, own, world)
    actual = 0
    for t in range(nsteps(collective, world)):
        st = step(collective, rank, world, t)
        actual += _step_bytes(collective, st, t, direct and collective != "reduce_scatter", in_place) \
            * counts[st.seg] * itemsize
    return minimal, actual
