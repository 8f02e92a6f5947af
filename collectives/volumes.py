"""Byte volumes and bus-bandwidth factors of the collectives, stated once.

Everything that counts bytes imports this module: the benchmark's busbw
(bench/collectives.py), ZeRO's per-step volume (bench/zero.py) and the byte
formulas that ``python -m collectives.teach.explain`` checks against its trace.

Ring volumes, with B the whole buffer in bytes, s_i the bytes of segment i
(rank i's piece) and every index mod N:

  reduce-scatter: rank r sends B - s_r,       receives B - s_(r-1)
  all-gather:     rank r sends B - s_(r+1),   receives B - s_r
  all-reduce:     the sum of both             (2(N-1)/N x B for an even split)
  broadcast:      every rank sends B except the end of the chain (root - 1);
                  every rank but the root receives B

Direct volumes (collectives/symmetric/direct.py: buffers in the node's
symmetric heap; nothing is sent, each rank reads its peers' buffers in place).
For each rank: what it reads from peers, and what peers read from its buffers:

  reduce-scatter: reads (N-1) s_r,            its input is read B - s_r
  all-gather:     reads B - s_r,              its piece is read (N-1) s_r
  all-reduce:     the sum of both, with the segments the direct path cuts
                  (64-byte aligned); up to its one-phase size every rank
                  reads every peer's whole input: (N-1) B each way
  broadcast:      every rank but the root reads B; the root's is read (N-1) B

Bus bandwidth (nccl-tests' convention) = algbw x factor, the factor being
what a rank must send for an even split, as a fraction of B: all-reduce
2(N-1)/N, reduce-scatter and all-gather (N-1)/N, broadcast 1. busbw is then
comparable to the link's speed whatever N is.

Within one node the "link" is memory. The least every rank together must move
through it (each input read once, each output written once; B as nccl-tests
sizes it: an all-gather's output, the others' input) is 2NB for an all-reduce,
(N+1)B for a reduce-scatter or an all-gather, NB for a broadcast, so memory of
bandwidth M (read + write, a copy's figure) caps busbw at M x factor x B /
those bytes: M(N-1)/N^2 for an all-reduce (M/4 on two ranks), M(N-1)/(N(N+1))
for a reduce-scatter or an all-gather (M/6), M/N for a broadcast
(``memory_roofline``).
"""
from __future__ import annotations

from typing import NamedTuple

from .dtypes import DATA_COLLECTIVES

OPS = DATA_COLLECTIVES


class Volume(NamedTuple):
    """Bytes one rank sends and receives in one collective, and how each is computed."""

    sent: int
    received: int
    sent_formula: str
    received_formula: str


def _check(op: str, n: int) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")
    if n < 1:
        raise ValueError(f"{op}: world size must be >= 1, got {n}")


def busbw_factor(op: str, n: int) -> float:
    """Bus-bandwidth factor of ``op`` on ``n`` ranks (busbw = algbw x factor).

    Args:
      op: all_reduce, reduce_scatter, all_gather or broadcast.
      n: world size.
    """
    _check(op, n)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather"):
        return (n - 1) / n
    return 1.0


def least_memory_bytes(op: str, nbytes: float, n: int) -> float:
    """Bytes all ``n`` ranks of one node must move through memory together (read + write)
    in collective ``op`` on ``nbytes`` (nccl-tests' size): every input read once, every
    output written once."""
    _check(op, n)
    return {"all_reduce": 2 * n, "reduce_scatter": n + 1, "all_gather": n + 1, "broadcast": n}[op] * nbytes


def memory_roofline(op: str, n: int, membw: float) -> float:
    """The busbw that memory of bandwidth ``membw`` (read + write) allows ``op`` on ``n``
    ranks of one node: ``membw x busbw_factor / (least_memory_bytes per byte)``."""
    return membw * busbw_factor(op, n) / least_memory_bytes(op, 1.0, n) if n > 1 else membw


def even_bytes_sent(op: str, nbytes: float, n: int) -> float:
    """Bytes each rank sends when ``nbytes`` splits evenly over ``n`` ranks: busbw factor x nbytes.

    Args:
      op: the collective.
      nbytes: the whole buffer (all-reduce, reduce-scatter input, all-gather output, broadcast).
      n: world size.
    """
    return busbw_factor(op, n) * nbytes


def ring_volumes(op: str, counts: list[int], itemsize: int, root: int = 0) -> list[Volume]:
    """Bytes each rank sends and receives in the ring ``op``, rank by rank.

    Args:
      op: the collective.
      counts: elements of each rank's segment (len(counts) is the world size;
        uneven and empty segments allowed). For broadcast only the sum matters.
      itemsize: bytes per element.
      root: broadcast root.
    """
    n = len(counts)
    _check(op, n)
    if not 0 <= root < n:
        raise ValueError(f"{op}: root {root} outside 0..{n - 1}")
    seg = [int(c) * itemsize for c in counts]
    b = sum(seg)
    if n == 1:
        return [Volume(0, 0, "N = 1: nothing", "N = 1: nothing")]
    out = []
    for r in range(n):
        prev, nxt = (r - 1) % n, (r + 1) % n
        rs = (b - seg[r], b - seg[prev], f"B - s{r}", f"B - s{prev}")
        ag = (b - seg[nxt], b - seg[r], f"B - s{nxt}", f"B - s{r}")
        if op == "reduce_scatter":
            out.append(Volume(*rs))
        elif op == "all_gather":
            out.append(Volume(*ag))
        elif op == "all_reduce":
            out.append(Volume(rs[0] + ag[0], rs[1] + ag[1], f"2B - s{r} - s{nxt}", f"2B - s{prev} - s{r}"))
        else:
            last = r == (root - 1) % n
            out.append(Volume(0 if last else b, 0 if r == root else b,
                              "0 (end of chain)" if last else "B", "0 (root)" if r == root else "B"))
    return out


def direct_volumes(op: str, counts: list[int], itemsize: int, root: int = 0,
                   one_phase: bool = False) -> list[Volume]:
    """Bytes each rank's buffers give to peers (``sent``: read from it) and take from
    them (``received``: it reads) in the direct ``op``, rank by rank.

    Args:
      op: the collective.
      counts: elements of each rank's segment, as the direct path cuts them
        (len(counts) is the world size). For broadcast only the sum matters.
      itemsize: bytes per element.
      root: broadcast root.
      one_phase: an all-reduce small enough that every rank reduces the whole
        vector from every peer's input.
    """
    n = len(counts)
    _check(op, n)
    if not 0 <= root < n:
        raise ValueError(f"{op}: root {root} outside 0..{n - 1}")
    seg = [int(c) * itemsize for c in counts]
    b, m = sum(seg), n - 1
    if n == 1:
        return [Volume(0, 0, "N = 1: nothing", "N = 1: nothing")]
    out = []
    for r in range(n):
        rs = (b - seg[r], m * seg[r], f"B - s{r}", f"(N-1) s{r}")
        ag = (m * seg[r], b - seg[r], f"(N-1) s{r}", f"B - s{r}")
        if op == "reduce_scatter":
            out.append(Volume(*rs))
        elif op == "all_gather":
            out.append(Volume(*ag))
        elif op == "all_reduce" and one_phase:
            out.append(Volume(m * b, m * b, "(N-1) B", "(N-1) B"))
        elif op == "all_reduce":
            out.append(Volume(rs[0] + ag[0], rs[1] + ag[1], f"B + (N-2) s{r}", f"B + (N-2) s{r}"))
        else:
            out.append(Volume(m * b if r == root else 0, 0 if r == root else b,
                              "(N-1) B (root)" if r == root else "0", "0 (root)" if r == root else "B"))
    return out


def zero_volume(psi: int, n: int, stage: int, param_bytes: int, grad_bytes: int) -> float:
    """ZeRO's bytes sent per rank per step (even split).

    Stage 0 all-reduces the gradients; stages 1-3 reduce-scatter them and
    all-gather the weights, twice at stage 3 (forward and again backward).

    Args:
      psi: number of parameters.
      n: world size.
      stage: ZeRO stage, 0-3.
      param_bytes: bytes per weight as gathered.
      grad_bytes: bytes per gradient as reduced.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0-3, got {stage}")
    if stage == 0:
        return even_bytes_sent("all_reduce", psi * grad_bytes, n)
    gathers = 2 if stage == 3 else 1
    return (even_bytes_sent("reduce_scatter", psi * grad_bytes, n)
            + gathers * even_bytes_sent("all_gather", psi * param_bytes, n))
