"""Under mpirun: a traced call that runs its plan's C program records what the Python
run of that call recorded, whether or not the program was written while tracing.

For each collective on heap arrays (the direct roads, which programs cover), and on
arrays of two sizes: (A) first call traced, in Python: the reference; (B) new arrays,
three calls untraced (the program is written on the way), then two traced calls, the
second of which runs the program. Prints one JSON line per rank: per case, each traced
call's {rank: {"sent", "recv"}} totals and data-event count, and whether the last ran in C.
"""
import json

import numpy as np

from collectives import Communicator
from collectives.teach.trace import Tracer

CALLS = {
    "all_reduce": lambda c, x, o: c.all_reduce(x, out=o),
    "reduce_scatter": lambda c, x, o: c.reduce_scatter(x, out=o[:x.size // c.size]),
    "all_gather": lambda c, x, o: c.all_gather(x[:x.size // c.size], out=o),
    "broadcast": lambda c, x, o: c.broadcast(x, root=c.size - 1, out=o),
}


def traced(c, fn):
    c.tracer = t = Tracer()
    try:
        fn()
    finally:
        c.tracer = None
    return t.totals(), len(t.data_events())


with Communicator() as comm:
    n, r, out = comm.size, comm.rank, {}
    for count in (1536 * n, 24576 * n):
        for kind, call in CALLS.items():
            case = {}
            for way in ("reference", "program"):
                x = comm.alloc((count,), np.float32)
                o = comm.alloc((count,), np.float32)
                x[:] = np.arange(count, dtype=np.float32) % 7 + r
                if way == "reference":
                    case[way] = traced(comm, lambda: call(comm, x, o))
                    continue
                for _ in range(3):
                    call(comm, x, o)
                plan = comm.last
                case["first traced"] = traced(comm, lambda: call(comm, x, o))
                runs = plan.program.runs if plan.program is not None else -1
                case["program"] = traced(comm, lambda: call(comm, x, o))
                case["ran_in_c"] = (plan.program.runs if plan.program is not None else -1) - runs
            ways = ("reference", "first traced", "program")
            out[f"{kind} {count * 4}"] = {way: [{str(q): v for q, v in case[way][0].items()}, case[way][1]]
                                          for way in ways}
            out[f"{kind} {count * 4}"]["ran_in_c"] = case["ran_in_c"]
print(json.dumps({"rank": r, "cases": out}), flush=True)
