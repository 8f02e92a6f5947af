"""Run under mpirun: the lane (collectives/fast/lane.py, csrc/lane.c) on ordinary arrays, checked exactly.

  lane_check.py fresh     fresh views x[:], out[:] every call (all four collectives, in place
                          too): exact, and every call after the first ran in C from the lane
  lane_check.py new       new arrays at new addresses (a ring of buffers): exact, relocated
                          programs run them, and the table stays bounded while callers
                          cycle through many buffers and shapes
  lane_check.py neighbours  the first call's x and out side by side in one buffer (out's first
                          byte is x's end), then new arrays apart: the relocated programs write
                          only out (guards around it stay zero), exact
  lane_check.py torch     fresh torch views through the Communicator: exact, in C
  lane_check.py mismatch  after many lane calls, ranks disagree: MismatchError on every rank
Prints one JSON line per rank: {"rank", "cases", "failures", "nfail", ...}.
"""
import json
import sys

from collectives import Communicator  # before mpi4py starts MPI

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from collectives.errors import MismatchError  # noqa: E402
from collectives.roads import DIRECT_ROADS  # noqa: E402

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
mode = sys.argv[1]
failures, cases, extra = [], 0, {}


def check(label, got, want):
    global cases
    cases += 1
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or not np.array_equal(g, w):
        failures.append(f"{label}: got {g.reshape(-1)[:6]} want {w.reshape(-1)[:6]}")


def data(count, q, call):
    return ((np.arange(count) * 7 + q * 13 + call) % 17 - 8).astype(np.float32)


def runs(comm):
    return comm.lane.stats()["runs"]


def calls(comm, count, fresh_x, fresh_out, tag, repeat=6):
    """Every collective ``repeat`` times on ``count`` elements; x and out through the two callables."""
    piece = count // n
    bufs = {"ar": (np.empty(count, np.float32), np.empty(count, np.float32)),
            "rs": (np.empty(count, np.float32), np.empty(piece, np.float32)),
            "ag": (np.empty(piece, np.float32), np.empty(count, np.float32)),
            "bc": (np.empty(count, np.float32), np.empty(count, np.float32))}
    in_c = []
    for call in range(repeat):
        xs = [data(count, q, call) for q in range(n)]
        total = np.sum(xs, axis=0)
        for name, (x, out) in bufs.items():
            before = runs(comm)
            if name == "ag":
                x[:] = xs[rank][:piece]
                got = comm.all_gather(fresh_x(x), out=fresh_out(out))
                want = np.concatenate([v[:piece] for v in xs])
            elif name == "bc":
                x[:] = xs[rank]
                got = comm.broadcast(fresh_x(x), root=n - 1, out=fresh_out(out))
                want = xs[n - 1]
            else:
                x[:] = xs[rank]
                f = comm.all_reduce if name == "ar" else comm.reduce_scatter
                got = f(fresh_x(x), out=fresh_out(out))
                want = total if name == "ar" else total[rank * piece:(rank + 1) * piece]
            check(f"{tag} {name} {count} #{call}", out, want)
            if got is None or np.asarray(got).ctypes.data != out.ctypes.data:
                failures.append(f"{tag} {name}: returned {type(got)} not a view of out")
            in_c.append((name, call, runs(comm) - before, comm.road_taken() in DIRECT_ROADS))
        # in place: out is x (all-reduce, broadcast)
        x = bufs["ar"][0]
        x[:] = xs[rank]
        before = runs(comm)
        comm.all_reduce(fresh_x(x), out=fresh_x(x))
        check(f"{tag} ar in place {count} #{call}", x, total)
        in_c.append(("ar in place", call, runs(comm) - before, True))
    return in_c


def fresh():
    comm = Communicator(timeout=60)
    report = []
    for count in (256 * n, 4096 * n, 65536 // 4 * n):  # 1 KiB, 16 KiB, 64 KiB pieces (these read in place)
        # (on three ranks or more, all-reduces above one_phase_bytes take two phases, which stay in Python)
        two = n > 2 and count * 4 > comm.tuning.one_phase_bytes
        report += [r for r in calls(comm, count, lambda a: a[:], lambda a: a[:], "fresh")
                   if not (two and r[0].startswith("ar"))]
    extra["first_in_c"] = sum(r for _, call, r, _ in report if call == 0)
    extra["later_in_c"] = sum(r for _, call, r, _ in report if call > 0)
    extra["later_calls"] = sum(1 for _, call, _, _ in report if call > 0)
    extra["direct"] = all(d for *_, d in report)
    extra["stats"] = comm.lane.stats()
    extra["missed"] = sorted({f"{name} {call}" for name, call, r, _ in report if call > 0 and not r})
    comm.close()


def new():
    comm = Communicator(timeout=60)
    ring = [np.empty(4096, np.float32) for _ in range(8)]  # x and out at 8 addresses apart
    for call in range(16):
        x, out = ring[call % 8], ring[(call + 3) % 8]
        xs = [data(4096, q, call) for q in range(n)]
        x[:] = xs[rank]
        comm.all_reduce(x, out=out)
        check(f"new #{call}", out, np.sum(xs, axis=0))
    extra["relocated"] = comm.lane.stats()["relocated"]
    extra["runs"] = runs(comm)
    # cycling through many buffers and shapes: the table and the plan cache stay bounded
    most = {"entries": 0, "templates": 0, "plans": 0}
    for call in range(300):
        count = 64 * (1 + call % 24)
        x, out = np.full(count, rank + 1, np.float32), np.empty(count, np.float32)
        comm.all_reduce(x, out=out)
        check(f"cycle #{call}", out, np.full(count, n * (n + 1) // 2, np.float32))
        st = comm.lane.stats()
        most = {"entries": max(most["entries"], st["entries"]), "templates": max(most["templates"], st["templates"]),
                "plans": max(most["plans"], len(comm.plans))}
    extra["most"] = most
    comm.close()


def neighbours():
    comm = Communicator(timeout=60)
    past = (comm.tuning.stage_max_all_reduce // 4 // n + 64) * n  # (two ranks) the all-reduce read in place
    for count in (256 * n, past):
        for kind in ("ar", "ag"):
            piece = count // n
            nx = count if kind == "ar" else piece
            buf = np.zeros(nx + count, np.float32)  # x, then out right after it
            for call in range(6):
                xs = [data(count, q, call) for q in range(n)]
                want = np.sum(xs, axis=0) if kind == "ar" else np.concatenate([v[:piece] for v in xs])
                if call < 2:
                    x, out = buf[:nx], buf[nx:]
                else:  # new arrays apart, with guards on both sides of out
                    x = np.empty(nx, np.float32)
                    guard = np.zeros(3 * count, np.float32)
                    out = guard[count:2 * count]
                x[:] = xs[rank][:nx]
                if kind == "ar":
                    comm.all_reduce(x, out=out)
                else:
                    comm.all_gather(x, out=out)
                check(f"neighbours {kind} {count} #{call}", out, want)
                check(f"neighbours {kind} {count} #{call} x", x, xs[rank][:nx])
                if call >= 2 and (guard[:count].any() or guard[2 * count:].any()):
                    failures.append(f"neighbours {kind} {count} #{call}: wrote outside out")
    extra["relocated"] = comm.lane.stats()["relocated"]
    comm.close()


def torch_views():
    import torch

    comm = Communicator(timeout=60)
    t, o = torch.zeros(1024), torch.zeros(1024)
    before = None
    for call in range(8):
        xs = [torch.from_numpy(data(1024, q, call)) for q in range(n)]
        t.copy_(xs[rank])
        comm.all_reduce(t[:], out=o[:])
        check(f"torch #{call}", o.numpy(), torch.stack(xs).sum(0).numpy())
        t.copy_(xs[rank])
        comm.all_reduce(t.view(-1), out=t.view(-1))  # in place, as the process group calls it
        check(f"torch in place #{call}", t.numpy(), torch.stack(xs).sum(0).numpy())
        if call == 1:
            before = runs(comm)
    extra["later_in_c"] = runs(comm) - before
    comm.close()


def mismatch():
    comm = Communicator(timeout=30)
    x, out = np.ones(256, np.float32), np.empty(256, np.float32)
    for _ in range(20):
        comm.all_reduce(x[:], out=out[:])
    extra["runs_before"] = runs(comm)
    op = "max" if rank == n - 1 else "sum"
    try:
        comm.all_reduce(x[:], op=op, out=out[:])
        failures.append("mismatch: no error")
    except MismatchError as e:
        extra["mismatch"] = str(e)
    comm.close()


{"fresh": fresh, "new": new, "neighbours": neighbours, "torch": torch_views, "mismatch": mismatch}[mode]()
print(json.dumps(dict(rank=rank, cases=cases, failures=failures[:10], nfail=len(failures), **extra)), flush=True)
