"""Where a small call's microseconds go (bench/collectives.py --breakdown).

For each collective and small size, on our ring's Communicator with ordinary
numpy arrays, timed in rounds with every part taking its turn (the median over
rounds of the slowest rank's mean per call), beside raw mpi4py on the same arrays:

- call: the whole call on the same objects; fresh: on new views ``x[:]``, ``out[:]``.
- checks: what a call that misses the plan cache does in Python before it moves
  a byte: adapt the arrays, check them, build the header, choose the road
  (``plan.all_reduce`` and friends with no cache key), alone on this rank.
- agreement: the header agreement alone: the barrier's C program (post the header,
  wait for every peer's, compare them: the first steps of every direct call's
  program) run straight from Python, as the lane runs a call's.
- movement: the bytes the road moves on this rank (stage copy, reduction or
  copies), alone, as the C fast path's own COPY and REDUCE ops run them.
- rest: call - agreement - movement: our Python entry, plan lookup and dispatch.
- dist.*: the same call through torch on the ringzero ProcessGroup (torch views of
  the same arrays), split into torch's own API (the call on a group that does
  nothing) and our group's share (dist.* - call - torch's API).
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from collectives import Communicator, plan
from collectives.fast.codes import C, DTYPES, OPS
from collectives.symmetric.cma import address

PARTS = ("mpi", "call", "fresh", "checks", "agreement", "movement", "dist", "torch_api")


def _program(words):
    prog = np.array(list(words) + [C.END], dtype=np.int64)
    return prog, address(prog)


def movement(op, x, out, rank, size):
    """A zero-argument call doing this rank's data work for ``op`` in C (None without C)."""
    if C is None or x.dtype not in DTYPES:
        return None
    stage = np.empty(max(x.nbytes, out.nbytes), np.uint8)
    peer = np.ones_like(x)
    if op == "all_reduce":  # stage the input, reduce ours and the peer's into out
        w = [C.COPY, address(stage), address(x), x.nbytes,
             C.REDUCE, DTYPES[x.dtype], OPS["sum"], address(out), x.size, 2, address(x), address(peer)]
    elif op == "reduce_scatter":  # stage the input, reduce our segment
        seg = out.size
        w = [C.COPY, address(stage), address(x), x.nbytes,
             C.REDUCE, DTYPES[x.dtype], OPS["sum"], address(out), seg, 2,
             address(x) + rank * seg * x.itemsize, address(peer) + rank * seg * x.itemsize]
    elif op == "all_gather":  # stage our piece, copy every piece into out
        w = [C.COPY, address(stage), address(x), x.nbytes]
        for q in range(size):
            w += [C.COPY, address(out) + q * x.nbytes, address(x if q == rank else peer), x.nbytes]
    else:  # broadcast: the root stages, every other rank copies
        w = [C.COPY, address(out), address(x), x.nbytes]
    prog, at = _program(w)
    run, keep = C.run, (prog, stage, peer)

    def call(keep=keep):
        run(at, 0, 1e18, 0.0, 0.0, 0.0)
    return call


def agreement(c):
    """A zero-argument call running the barrier's C program alone (``c.barrier`` where there is none)."""
    c.barrier()
    c.barrier()  # the second call writes the program (fast/program.py)
    prog = getattr(c._barrier_plan, "program", None)
    if prog is None or c.symmetric is None:
        return c.barrier
    sig = c.symmetric.signals
    spin, yld = sig.policy.times()
    run, addrs, most = C.run, prog.addrs, sig.policy.max_sleep

    def call():
        e = sig.epoch + 1  # every rank runs the same programs in the same order: the epochs agree
        sig.epoch = e
        run(addrs[e & 1], 8 * e, time.monotonic() + 60.0, spin, yld, most)
    return call


def _calls(c, world, op, x, out, redop):
    """{part: zero-argument call} for one case (dist.* parts added by the caller)."""
    mop = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[redop]
    if op == "all_reduce":
        f = c.all_reduce
        calls = dict(mpi=lambda: world.Allreduce(x, out, op=mop), call=lambda: f(x, op=redop, out=out),
                     fresh=lambda: f(x[:], op=redop, out=out[:]),
                     checks=lambda: plan.all_reduce(c, None, x, redop, out))
    elif op == "reduce_scatter":
        f = c.reduce_scatter
        calls = dict(mpi=lambda: world.Reduce_scatter_block(x, out, op=mop), call=lambda: f(x, op=redop, out=out),
                     fresh=lambda: f(x[:], op=redop, out=out[:]),
                     checks=lambda: plan.reduce_scatter(c, None, x, redop, out, None))
    elif op == "all_gather":
        f = c.all_gather
        calls = dict(mpi=lambda: world.Allgather(x, out), call=lambda: f(x, out=out),
                     fresh=lambda: f(x[:], out=out[:]), checks=lambda: plan.all_gather(c, None, x, out, None))
    else:
        f = c.broadcast
        calls = dict(mpi=lambda: world.Bcast(out, 0), call=lambda: f(x, root=0, out=out),
                     fresh=lambda: f(x[:], root=0, out=out[:]), checks=lambda: plan.broadcast(c, None, x, 0, out))
    calls["agreement"] = agreement(c)
    m = movement(op, x, out, world.rank, world.size)
    if m is not None:
        calls["movement"] = m
    return calls


def _dist_calls(group, noop, op, tx, tout, redop):
    import torch.distributed as dist

    rop = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
           "prod": dist.ReduceOp.PRODUCT}[redop]
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    out = {}
    for name, g in (("dist", group), ("torch_api", noop)):
        if op == "all_reduce":
            out[name] = lambda g=g: dist.all_reduce(tout, op=rop, group=g)
        elif op == "reduce_scatter":
            out[name] = lambda g=g: rs(tout, tx, op=rop, group=g)
        elif op == "all_gather":
            out[name] = lambda g=g: ag(tout, tx, group=g)
        elif name == "dist":  # torch's broadcast asks its registry for the root: no loose group
            out[name] = lambda g=g: dist.broadcast(tout, src=0, group=g)
    return out


def _time(world, call, k):
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(k):
        call()
    return world.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX)


def breakdown(world, ops, sizes, dtype, redop, rounds, comms, say, block_s=2e-3) -> list[dict]:
    """Time every part of ``ops`` at ``sizes`` (bytes; all-gather: the output) and print the table.

    Args:
      comms: the benchmark's communicators: its "ring" Communicator is used when present
        (else one is made), its "torch" group for the dist.* parts (else they are left out).
    Returns one record per case (``breakdown: True``, every part's median in ``parts_us``).
    """
    c = comms.get("ring") if isinstance(comms.get("ring"), Communicator) else None
    made = c is None
    if made:
        c = Communicator()
    group = getattr(comms.get("torch"), "group", None)
    noop = None
    if group is not None:
        import torch

        from torch_groups import noop_group  # bench/torch_groups.py

        noop = noop_group(world.rank, world.size)
    n, r, recs = world.size, world.rank, []
    say()
    say(f"# breakdown of small calls (us per call, {n} ranks, ordinary numpy arrays, median of {rounds} rounds;"
        " bench/breakdown.py): rest = call - agreement - movement; group = dist.* - call - torch's API")
    say(f"{'op':>14} {'size(B)':>8} {'mpi':>6} {'call':>6} {'fresh':>6} {'checks':>6} {'agree':>6} "
        f"{'move':>6} {'rest':>6} {'dist.*':>7} {'torch':>6} {'group':>6}")
    for op in [o for o in ops if o in ("all_reduce", "reduce_scatter", "all_gather", "broadcast")]:
        for size in sizes:
            count = size // np.dtype(dtype).itemsize
            count -= count % n
            piece = count // n
            xn, on = {"all_reduce": (count, count), "reduce_scatter": (count, piece),
                      "all_gather": (piece, count), "broadcast": (count, count)}[op]
            x = (np.arange(xn) % 7).astype(dtype)
            out = np.zeros(on, dtype)
            calls = _calls(c, world, op, x, out, redop)
            if group is not None:
                calls.update(_dist_calls(group, noop, op, torch.from_numpy(x), torch.from_numpy(out), redop))
            names = [p for p in PARTS if p in calls]
            ks = {}
            for p in names:
                for _ in range(3):
                    calls[p]()
                t0 = time.perf_counter()
                for _ in range(10):
                    calls[p]()
                per = world.allreduce((time.perf_counter() - t0) / 10, op=MPI.MAX)
                ks[p] = int(min(max(10, block_s / max(per, 1e-9)), 5000))
            times = {p: [] for p in names}
            for rnd in range(rounds):
                for p in names[rnd % len(names):] + names[:rnd % len(names)]:
                    times[p].append(_time(world, calls[p], ks[p]))
            med = {p: float(np.median(v)) * 1e6 for p, v in times.items()}
            rest = med["call"] - med["agreement"] - med.get("movement", 0.0)
            group_us = med["dist"] - med["call"] - med["torch_api"] if "torch_api" in med else None
            rec = dict(op=op, bytes=int(out.nbytes if op == "all_gather" else x.nbytes), ranks=n, dtype=str(dtype),
                       breakdown=True, parts_us=med, rest_us=rest, group_us=group_us, rounds=rounds,
                       algorithm="ring")
            recs.append(rec)

            def f(v, w=6):
                return f"{v:>{w}.2f}" if v is not None else f"{'-':>{w}}"
            say(f"{op:>14} {rec['bytes']:>8} {f(med['mpi'])} {f(med['call'])} {f(med['fresh'])} {f(med['checks'])} "
                f"{f(med['agreement'])} {f(med.get('movement'))} {f(rest)} {f(med.get('dist'), 7)} "
                f"{f(med.get('torch_api'))} {f(group_us)}")
    if made:
        c.close()
    return recs
