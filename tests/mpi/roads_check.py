"""Every road, forced, exact against numpy; and a traced call takes the road the untraced one took.

    mpirun -n N python tests/mpi/roads_check.py force ROAD   # COLLECTIVES_STAGE as the test sets it
    mpirun -n N python tests/mpi/roads_check.py traced

force: a Communicator(road=ROAD) runs every collective the road serves, three calls each
(ordinary arrays, and heap ones where the road reads the heap), checks each result
against numpy and that the call took ROAD (road_taken); where the road runs its
repeated calls in C, that the program ran; and forced for a collective it does not
serve, that the call raises RoadError. traced: the natural road of a grid of calls,
untraced then traced, must be the same, the trace records it, and ``Communicator.road``
asked before the calls names it.
Prints one JSON line per rank.
"""
import json
import sys

import numpy as np

from collectives import Communicator, RoadError
from collectives.roads import BY_ROAD, IN_C, Road
from collectives.teach.trace import Tracer

mode = sys.argv[1]
failures, cases, extra = [], 0, {}


def check(label, got, want):
    global cases
    cases += 1
    if not np.array_equal(np.asarray(got), want):
        failures.append(f"{label}: wrong")


def calls(comm, kind, heap, count=1000, dtype=np.float32):
    """(run, want, ask): one call of ``kind`` on rank-dependent data, its result, and the road query
    of the same call; ``heap``: in and out in the heap."""
    run, want, args = _call(comm, kind, heap, count, dtype)
    x, out, kw = args
    return run, want, lambda: comm.road(kind, x, out=out, **kw)


def _call(comm, kind, heap, count, dtype):
    n, r = comm.size, comm.rank
    xs = [(np.arange(count) % 97 + q).astype(dtype) for q in range(n)]
    if kind == "all_reduce":
        x, out = _arrays(comm, heap, count, count, dtype)
        x[:] = xs[r]
        return lambda: comm.all_reduce(x, out=out), sum(xs), (x, out, {})
    if kind == "reduce_scatter":
        x, out = _arrays(comm, heap, count * n, count, dtype)
        x[:] = np.concatenate([xs[r]] * n)
        return lambda: comm.reduce_scatter(x, out=out), sum(xs), (x, out, {})
    if kind == "all_gather":
        x, out = _arrays(comm, heap, count, count * n, dtype)
        x[:] = xs[r]
        return lambda: comm.all_gather(x, out=out), np.concatenate(xs), (x, out, {})
    if kind == "broadcast":
        x, out = _arrays(comm, heap, count, count, dtype)
        x[:] = xs[r]
        return lambda: comm.broadcast(x, root=n - 1, out=out), xs[n - 1], (x, out, {"root": n - 1})
    return lambda: comm.barrier(), None, (None, None, {})


def _arrays(comm, heap, nx, nout, dtype):
    if heap:
        return comm.alloc((nx,), dtype), comm.alloc((nout,), dtype)
    return np.empty(nx, dtype), np.empty(nout, dtype)


def force(name):
    road = Road(name)
    algorithm = name if road in (Road.MPI, Road.NCCL) else "ring"
    comm = Communicator(timeout=30, algorithm=algorithm, road=road)
    heaps = (True,) if road in (Road.PUSH, Road.HIER) else (False, True) if road is Road.DIRECT else (False,)
    runs = 0
    for kind in BY_ROAD[road].serves:
        for heap in heaps:
            if road is Road.PUSH and kind == "all_gather":  # the push starts at push_min_all_gather of out
                count = comm.tuning.push_min_all_gather // 4 // comm.size + 13
            elif road is Road.PUSH:
                count = comm.tuning.one_phase_bytes // 4 + 1000
            else:
                count = 1000
            run, want, _ = calls(comm, kind, heap, count)
            for call in range(3):
                got = run()
                label = f"{name} {kind} heap={heap} #{call}"
                if want is not None:
                    check(label, got, want)
                if comm.road_taken() is not road:
                    failures.append(f"{label}: took {comm.road_taken()}")
            if road in IN_C and comm.last.program is not None:
                runs += comm.last.program.runs
    if comm.lane is not None:  # calls the lane took into C at their first line (csrc/lane.c)
        runs += comm.lane.stats()["runs"]
    extra["c_runs"] = runs
    comm.close()
    others = [k for k in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier")
              if k not in BY_ROAD[road].serves]
    if others:  # forced for a collective it does not serve: a RoadError saying why, before a byte moves
        c = Communicator(timeout=30, algorithm=algorithm, road={others[0]: road})
        try:
            calls(c, others[0], False)[0]()
            failures.append(f"{name}: {others[0]} ran")
        except RoadError as e:
            extra["refused"] = str(e)
        c.close()


def traced():
    """The natural roads of a grid, untraced then traced: the same, recorded by the tracer."""
    comm = Communicator(timeout=30)
    for kind in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"):
        for count in (64, 20000, 300000, 1 << 20):
            for heap in (False, True):
                run, want, ask = calls(comm, kind, heap, count)
                said = ask().road
                roads = []
                for tracer in (None, Tracer()):
                    comm.tracer = tracer
                    for _ in range(3):  # the repeated calls too (C programs)
                        got = run()
                        if want is not None:
                            check(f"traced={tracer is not None} {kind} {count} heap={heap}", got, want)
                    roads.append(comm.road_taken())
                    if tracer is not None:
                        recorded = set(tracer.roads().values())
                        if recorded != {roads[0].value}:
                            failures.append(f"{kind} {count} heap={heap}: trace says {recorded}, took {roads}")
                comm.tracer = None
                if roads[0] is not roads[1]:
                    failures.append(f"{kind} {count} heap={heap}: untraced {roads[0]}, traced {roads[1]}")
                if said is not roads[0]:
                    failures.append(f"{kind} {count} heap={heap}: road() said {said}, the call took {roads[0]}")
                extra.setdefault("roads", set()).add(roads[0].value)
    extra["roads"] = sorted(extra.get("roads", ()))
    comm.close()


if mode == "force":
    force(sys.argv[2])
else:
    traced()
from mpi4py import MPI  # noqa: E402

print(json.dumps({"rank": MPI.COMM_WORLD.Get_rank(), "cases": cases, "failures": failures[:10],
                  "nfail": len(failures), **extra}), flush=True)
