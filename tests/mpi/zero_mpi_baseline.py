"""Run under mpirun: ZeRO stages 0-3 over the MPI baseline communicator train like
over the ring (issue 11, defect 8: stage 0 all-reduces in place, stages 1-2
all-gather with x inside out; MPI got overlapping buffers and failed with
MPI_ERR_BUFFER). Prints one JSON line per rank: {"rank", "failures": [...]}.
"""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from model import forward_backward, init_units, make_data  # noqa: E402

from collectives import Communicator  # noqa: E402
from sharding import AdamW, ZeroOptimizer  # noqa: E402

SIZES, BATCH, NAMES = [6, 20, 13, 5], 24, [f"layer{i}" for i in range(3)]
X, Y = make_data(BATCH, 6, 5)


def train(comm, stage, steps=2):
    opt = ZeroOptimizer(init_units(SIZES), comm, stage, AdamW(lr=1e-2, weight_decay=0.01))
    n = BATCH // comm.size
    xs, ys = X[comm.rank * n:(comm.rank + 1) * n], Y[comm.rank * n:(comm.rank + 1) * n]
    for _ in range(steps):
        forward_backward(opt.gather, opt.reduce_grads, NAMES, xs, ys)
        opt.step()
    return opt.full_params()


ring, mpi = Communicator(timeout=60), Communicator(algorithm="mpi", timeout=60)
failures = []
for stage in range(4):
    try:
        a, b = train(ring, stage), train(mpi, stage)
    except Exception as e:  # the old baseline: MPI_ERR_BUFFER at stage 0
        failures.append(f"stage {stage}: {type(e).__name__}: {e}")
        break
    for u in a:
        for k in a[u]:
            if not np.allclose(a[u][k], b[u][k], rtol=1e-6, atol=1e-7):
                failures.append(f"stage {stage} {u}.{k}: ring and MPI baseline differ")
print(json.dumps({"rank": ring.rank, "failures": failures[:10]}), flush=True)
for c in (ring, mpi):
    c.close()
