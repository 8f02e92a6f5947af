"""Run under mpirun: torch CPU tensors through every collective, for the ring
(tiny chunks and default) and the MPI baseline, bit for bit against numpy;
also the MPI baseline in place (issue 11 defect 8) and float16 avg without
overflow (defect 11) on real ranks. Prints one JSON line per rank:
{"rank", "cases", "failures": [...]}.
"""
import json
import os
import sys

import numpy as np
import torch
from mpi4py import MPI

from collectives import Communicator
from collectives.dtypes import KERNEL_DTYPES, to_dtype

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from inputs import data  # noqa: E402  (tests/inputs.py)

world = MPI.COMM_WORLD
n, rank = world.size, world.rank
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
         "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}
comms = {"ring/tiny-chunks": Communicator(chunk_bytes=256, small_bytes=0, timeout=60),
         "ring": Communicator(timeout=60), "mpi": Communicator(algorithm="mpi", timeout=60)}
failures, cases = [], 0


def tensor(a, name):
    return torch.from_numpy(np.asarray(a, np.float64)).to(TORCH[name])


def check(label, got, want, name, same_object=None):
    global cases
    cases += 1
    if not isinstance(got, torch.Tensor) or got.dtype != TORCH[name]:
        failures.append(f"{label}: got {type(got).__name__} {getattr(got, 'dtype', '')}")
        return
    if same_object is not None and got is not same_object:
        failures.append(f"{label}: did not return out itself")
    g = got.to(torch.float64).numpy().astype(to_dtype(name))
    if g.tobytes() != np.asarray(want).astype(to_dtype(name)).tobytes():
        failures.append(f"{label}: got {g[:6]} want {np.asarray(want)[:6]}")


for cname, c in comms.items():
    for name in KERNEL_DTYPES:
        for count in (0, 1, 7, 1000 + n) + (() if cname.startswith("ring/tiny") else (70001,)):
            xs = [data(count, r, np.float64) for r in range(n)]
            total = np.sum(xs, axis=0)
            counts = [count // n + (i < count % n) for i in range(n)]
            lo = sum(counts[:rank])
            tag = f"{cname} {name} count={count}"
            x = tensor(xs[rank], name)
            check(f"all_reduce {tag}", c.all_reduce(x), total, name)
            y = x.clone()
            check(f"all_reduce in place {tag}", c.all_reduce(y, out=y), total, name, same_object=y)
            o = torch.empty_like(x)
            check(f"all_reduce out {tag}", c.all_reduce(x, out=o, op="max"), np.max(xs, axis=0), name, o)
            o = torch.empty(counts[rank], dtype=TORCH[name])
            check(f"reduce_scatter {tag}", c.reduce_scatter(x, counts=counts, out=o), total[lo:lo + counts[rank]],
                  name, o)
            want = np.concatenate([xs[q][:counts[q]] for q in range(n)])
            check(f"all_gather {tag}", c.all_gather(x[:counts[rank]].clone(), counts=counts), want, name)
            g = tensor(np.zeros(count), name)
            g[lo:lo + counts[rank]] = x[:counts[rank]]
            check(f"all_gather in place {tag}", c.all_gather(g[lo:lo + counts[rank]], out=g, counts=counts),
                  want, name, g)
            b = x.clone()
            check(f"broadcast in place {tag}", c.broadcast(b, root=n - 1, out=b), xs[-1], name, b)
    h = np.full(1000, 30000, np.float16)  # avg: n * 30000 overflows float16 when summed first
    got = c.all_reduce(torch.from_numpy(h), op="avg")
    check(f"float16 avg {cname}", got, h, "float16")
for c in comms.values():
    c.close()
print(json.dumps({"rank": rank, "cases": cases, "failures": failures[:20], "nfail": len(failures)}), flush=True)
