"""Killed-during-save helper for tests/test_sharding_checkpoint.py (a plain subprocess,
two simulated ranks): save a complete checkpoint, record its weights, train on,
start a second save that stalls after its first file, and wait to be killed."""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from model import forward_backward, init_units, make_data  # noqa: E402

from sharding import AdamW, ZeroOptimizer  # noqa: E402
from collectives import simulate  # noqa: E402

out = Path(sys.argv[1])
SIZES = [6, 20, 5]
x, y = make_data(8, 6, 5)


def stall(path):
    print("WRITING", path, flush=True)
    time.sleep(60)


def fn(comm):
    opt = ZeroOptimizer(init_units(SIZES), comm, 3, AdamW(lr=1e-2))
    names = list(opt.units)
    n = 8 // comm.size
    for step in range(2):
        forward_backward(opt.gather, opt.reduce_grads, names, x[comm.rank * n:(comm.rank + 1) * n],
                         y[comm.rank * n:(comm.rank + 1) * n])
        opt.step()
        if step == 0:
            opt.save_checkpoint(out / "ckpt")
            full = opt.full_params()
            if comm.rank == 0:
                np.savez(out / "saved.npz", **{f"{u}/{k}": v for u, d in full.items() for k, v in d.items()})
                print("SAVED", flush=True)
    opt.save_checkpoint(out / "ckpt", hook=stall if comm.rank == 1 else None)


simulate(2, fn, timeout=120)
