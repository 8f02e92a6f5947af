"""A node whose shared memory is short (run in a 64 MiB /dev/shm by tests/test_setup.py).

1. A heap allocation that cannot fit raises SharedMemoryError on every rank within
   seconds, naming the bytes needed and free and the way out; nothing is left in
   /dev/shm, and the communicator still works.
2. ZeroOptimizer, whose buffers would go to the heap by default, falls back to ordinary
   arrays with one warning, and trains to the weights of symmetric=False.
Prints one line per result, per rank.
"""
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from model import forward_backward, init_units, make_data  # noqa: E402

from collectives import Communicator, SharedMemoryError  # noqa: E402
from sharding import AdamW, ZeroOptimizer  # noqa: E402

comm = Communicator(timeout=60)
r = comm.rank
t0 = time.monotonic()
try:
    comm.alloc((12 << 20,), np.float32)  # 48 MiB a rank: 96 MiB on the node
    print(f"rank {r}: alloc NO ERROR", flush=True)
except SharedMemoryError as e:
    print(f"rank {r}: SharedMemoryError after {time.monotonic() - t0:.1f} s: {e}", flush=True)
y = comm.all_reduce(np.full(1000, r + 1.0))  # first: every rank is past its own cleanup then
leftover = sorted(p.name for p in Path("/dev/shm").glob("ringzero-*"))
print(f"rank {r}: after: exact={bool((y == 3.0).all())} leftover={len(leftover)}", flush=True)


def train(symmetric):
    units = init_units([32, 2048, 2048, 2048, 10], seed=0)  # 8.5M parameters: ~100 MiB of heap buffers a rank
    names = list(units)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = ZeroOptimizer(units, comm, 2, AdamW(lr=1e-3), symmetric=symmetric)
    x, y = make_data(8 * comm.size * 2, 32, 10)
    for step in range(2):
        b = step * 8 * comm.size + r * 8
        forward_backward(opt.gather, opt.reduce_grads, names, x[b:b + 8], y[b:b + 8])
        opt.step()
    full = opt.full_params()
    w = np.concatenate([np.asarray(full[n][k], np.float32).ravel() for n in names for k in sorted(full[n])])
    return opt.symmetric, [str(c.message) for c in caught], w


sym, warned, w = train(None)
_, _, ref = train(False)
print(f"rank {r}: zero: symmetric={sym} warnings={len(warned)} same_as_ordinary={bool(np.array_equal(w, ref))} "
      f"warning={warned[0] if warned else ''}", flush=True)
comm.close()
