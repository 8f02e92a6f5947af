"""Measure the road table's crossovers on this machine and write a tuning file the library reads.

    mpirun -n 2 python bench/tune.py --out ~/.config/ringzero/tuning.json
    RINGZERO_TUNING=that.json mpirun -n 2 python your_job.py     # or leave it at ~/.config/ringzero/

Each crossover is two forced roads (collectives/roads/) timed in turns on the same
arrays, at sizes a factor apart: the setting becomes the largest size up to which the road
below the threshold is at least as fast at every size (the median of round-by-round ratios;
each round about 20 ms of calls per road).

- small_bytes: the header-exchange road against the point-to-point one (staging off);
- stage_max_<collective>: a staged call on the direct roads against the staged-ring; for
  the all-reduce, in place (as dist.all_reduce and DDP's buckets call it) against the road
  the table takes past the limit, the read in place where the kernel allows it (out of place
  reads in place from cma_min_all_reduce whatever the limit), on a grid four sizes an octave;
- cma_min_bytes: all-gather pieces of ordinary arrays read in place (process_vm_readv)
  against staged; stage_max_in_place: the same for in-place all-gathers (x inside out,
  FSDP2's form), staged against read in place from the smallest pieces;
- pipe_min_all_reduce, pipe_min_all_gather: the pipe against the staged-ring (all-reduce) or the read in
  place (all-gather); 0 (never) where it wins at no size;
- push_min_all_gather: heap all-gathers pushed against pulled.

The file also records the rank count (the stage limits apply to nodes of that size),
the machine and every measured ratio. Defaults stay the built-in ones where a
crossover is not measured (one process, no C extension). Two cores cannot show
scaling: run it on the machine and rank count the jobs use.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from collectives import Communicator  # noqa: E402
from collectives.fast.codes import has_c  # noqa: E402
from collectives.roads import Road  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
ROUND_S = 0.02  # seconds of calls per road per round


IN_PLACE = "all_gather in place"  # an all-gather whose x is the rank's own piece of out
AR_IN_PLACE = "all_reduce in place"  # out is x


def call(comm, kind, x, out):
    if kind in ("all_reduce", AR_IN_PLACE):
        return comm.all_reduce(x, out=out)
    if kind == "reduce_scatter":
        return comm.reduce_scatter(x, out=out)
    if kind in ("all_gather", IN_PLACE):
        return comm.all_gather(x, out=out)
    return comm.broadcast(x, root=0, out=out)


def arrays(comm, kind, nbytes, heap=False):
    """(x, out) of a call whose size is ``nbytes`` as the tuning table counts it, every page
    written: an input np.zeros made and never wrote maps the kernel's one zero page, which a
    stage copy then reads from L1 (at 2 MiB that put the staged all-reduce at 0.92x the
    staged-ring's time where written arrays give 1.14x: 2026-12-06-cpu2g-baselines/)."""
    n, count = comm.size, max(1, nbytes // 4)

    def make(k):
        a = comm.alloc((k,), np.float32) if heap else np.empty(k, np.float32)
        a[...] = comm.rank + 1
        return a
    if kind == "all_gather":  # the stage and cma limits count a piece, the pipe and push limits the out
        return make(count), make(count * n)
    if kind == IN_PLACE:
        out = make(count * n)
        return out[comm.rank * count:(comm.rank + 1) * count], out
    if kind == AR_IN_PLACE:
        out = make(count)
        return out, out
    if kind == "reduce_scatter":
        count -= count % n
        return make(max(count, n)), make(max(count, n) // n)
    return make(count), make(count)


def paired(comms, kind, nbytes, rounds, heap=False) -> float:
    """Median over rounds of time(comms[0]) / time(comms[1]) on the same sizes (< 1: the first is faster)."""
    bufs = [arrays(c, kind, nbytes, heap) for c in comms]
    for c, (x, out) in zip(comms, bufs):  # warm: plans, programs, windows
        for _ in range(3):
            call(c, kind, x, out)
    # enough calls for a round of about ROUND_S on each road (every rank agrees: the slowest's count),
    # so a round is long against the machine's scheduling noise at every size
    once = []
    for c, (x, out) in zip(comms, bufs):
        c.barrier()
        t0 = time.perf_counter()
        call(c, kind, x, out)
        once.append(time.perf_counter() - t0)
    once = comms[0].all_reduce(np.array(once), op="max")
    reps = int(max(3, min(2000, ROUND_S / max(once.max(), 1e-7))))
    ratios = []
    for _ in range(rounds):
        t = []
        for c, (x, out) in zip(comms, bufs):
            c.barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                call(c, kind, x, out)
            t.append(time.perf_counter() - t0)
        # every rank's slowest counts (a collective ends when the last rank does)
        t = comms[0].all_reduce(np.array(t), op="max")
        ratios.append(t[0] / t[1])
    return statistics.median(ratios)


def crossover(name, comms, kind, sizes, rounds, log, heap=False) -> int | None:
    """The largest size up to which comms[0]'s road is at least as fast as comms[1]'s at every size.

    A win above the first loss does not move the threshold: it is where the curves cross first
    (a later win at one size is as often the machine's noise as the road's)."""
    best, seen, lost = None, [], False
    for nbytes in sizes:
        r = paired(comms, kind, nbytes, rounds, heap)
        seen.append([nbytes, round(r, 3)])
        lost = lost or r > 1.0
        if not lost:
            best = nbytes
    log[name] = seen
    if comms[0].rank == 0:
        print(f"{name}: {' '.join(f'{s // KiB}K:{r:.2f}' for s, r in seen)} -> {best}", flush=True)
    return best


STAGED = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def with_settings(make, values: dict):
    """``make()`` with these settings over the table's: a tuning file of them (RINGZERO_TUNING) for
    the time of the call, as a user's own file would be read (collectives/tuning)."""
    old = os.environ.get("RINGZERO_TUNING")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tuning.json"
        path.write_text(json.dumps({"values": values}))
        os.environ["RINGZERO_TUNING"] = str(path)
        try:
            return make()
        finally:
            if old is None:
                del os.environ["RINGZERO_TUNING"]
            else:
                os.environ["RINGZERO_TUNING"] = old


def size(text: str) -> int:
    """Bytes, with an optional K, M or G suffix (as bench/collectives.py's -b/-e)."""
    mult = {"K": KiB, "M": MiB, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="tuning file to write (default: print only)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="small,stage,cma,pipe,push", help="which crossovers (comma-separated)")
    ap.add_argument("--max-bytes", type=size, default=64 * MiB, help="largest size measured (e.g. 64M)")
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    probe = Communicator()
    n = probe.size
    values, log = {}, {}

    def sizes(lo, hi, per_octave=1):
        """lo, then per_octave sizes an octave (whole 4 KiB past 4 KiB), up to hi and --max-bytes."""
        out, i = [], 0
        while (s := int(lo * 2 ** (i / per_octave))) <= min(hi, a.max_bytes):
            out.append(s if s < 4 * KiB else s - s % (4 * KiB))
            i += 1
        return out

    if "small" in only and n > 1:
        comms = [Communicator(stage="0", road=Road.SMALL),
                 Communicator(stage="0", road={"all_reduce": Road.PAIR if n == 2 else Road.RING})]
        got = crossover("small_bytes", comms, "all_reduce", sizes(8 * KiB, 256 * KiB), a.rounds, log)
        values["small_bytes"] = got if got is not None else 0
        for c in comms:
            c.close()
    if "stage" in only and n > 1:
        # the staged side's limits lifted: left at the table's, it takes the staged-ring above
        # them too, and the crossover compares that road with itself
        staged = with_settings(lambda: Communicator(stage="1"), {**{f"stage_max_{k}": 1 << 40 for k in STAGED},
                                                                 "cma_min_bytes": 1 << 40})
        for kind in STAGED:
            if kind == "all_reduce":  # every size past the limit: the road the table takes there, nothing forced
                ring = with_settings(lambda: Communicator(stage="1"), {"stage_max_all_reduce": 0})
                got = crossover("stage_max_all_reduce", [staged, ring], AR_IN_PLACE, sizes(64 * KiB, 8 * MiB, 4),
                                a.rounds, log)
            else:
                ring = Communicator(stage="1", road={kind: Road.STAGED_RING})
                got = crossover(f"stage_max_{kind}", [staged, ring], kind, sizes(64 * KiB, 8 * MiB), a.rounds, log)
            values[f"stage_max_{kind}"] = got if got is not None else 0
            ring.close()
        staged.close()
        values["stage_ranks"] = n
    if "cma" in only and n > 1:
        # pieces staged at every size against read in place at every size; the threshold is the
        # first piece size from which reading in place wins at every larger size measured
        staged = with_settings(lambda: Communicator(stage="1"), {"cma_min_bytes": 1 << 40,
                                                                 "stage_max_all_gather": 1 << 40})
        cma = with_settings(lambda: Communicator(stage="1"), {"cma_min_bytes": 0})
        if cma.symmetric is not None and cma.symmetric.direct.pids is not None:  # the kernel allows it here
            crossover("cma_min_bytes", [staged, cma], "all_gather", sizes(2 * KiB, 4 * MiB), a.rounds, log)
            seen = log["cma_min_bytes"]
            wins = [s for s, r in seen if r >= 1.0 and all(q >= 1.0 for t, q in seen if t >= s)]
            values["cma_min_bytes"] = min(wins, default=2 * seen[-1][0])
            # in place: staged at every size against read in place from the smallest piece
            inplace = with_settings(lambda: Communicator(stage="1"), {"stage_max_in_place": 1 << 40})
            offered = with_settings(lambda: Communicator(stage="1"), {"cma_min_bytes": 0, "stage_max_in_place": 0})
            got = crossover("stage_max_in_place", [inplace, offered], IN_PLACE, sizes(8 * KiB, 4 * MiB), a.rounds,
                            log)
            values["stage_max_in_place"] = got if got is not None else 0
            inplace.close()
            offered.close()
        cma.close()
        staged.close()
    if "pipe" in only and n > 1 and has_c():
        for kind in ("all_reduce", "all_gather"):
            pipe = Communicator(stage="1", road={kind: Road.PIPE})
            # against the road the call takes without it: the staged-ring for an all-reduce, the read in
            # place (cma) for an all-gather's large pieces
            ring = Communicator(stage="1", road={kind: Road.STAGED_RING}) if kind == "all_reduce" \
                else Communicator(road={kind: Road.DIRECT})
            # the pipe is the road from the threshold up: the first size where it wins, after which it keeps winning
            log_name = f"pipe_min_{kind}"
            crossover(log_name, [ring, pipe], kind, sizes(4 * MiB, 64 * MiB), a.rounds, log)
            wins = [s for s, r in log[log_name] if r >= 1.0]
            if log[log_name]:  # from the first size the pipe wins at and keeps winning above; else 0: never
                values[log_name] = min((s for s in wins if all(r >= 1.0 for t, r in log[log_name] if t >= s)),
                                       default=0)
            pipe.close()
            ring.close()
    if "push" in only and n > 1:
        push = Communicator(road={"all_gather": Road.PUSH})
        pull = Communicator(road={"all_gather": Road.DIRECT})
        crossover("push_min_all_gather", [pull, push], "all_gather", sizes(64 * KiB, 8 * MiB), a.rounds, log,
                  heap=True)
        seen = log["push_min_all_gather"]
        wins = [s for s, r in seen if r >= 1.0 and all(q >= 1.0 for t, q in seen if t >= s)]
        if seen:
            values["push_min_all_gather"] = min(wins, default=2 * seen[-1][0])
        push.close()
        pull.close()
    if probe.rank == 0:
        doc = {"machine": f"{socket.gethostname()} {platform.machine()} {os.cpu_count()} cores",
               "ranks": n, "date": time.strftime("%Y-%m-%d"), "values": values, "measured": log,
               "how": "bench/tune.py: forced roads in turns, median of round-by-round time ratios"}
        text = json.dumps(doc, indent=1)
        if a.out:
            Path(a.out).expanduser().parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).expanduser().write_text(text + "\n")
            print(f"wrote {a.out}")
        else:
            print(text)
    probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
