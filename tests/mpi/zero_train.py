"""Real-MPI check of ZeroOptimizer (run by tests/test_sharding_mpi.py):

    zero_train.py train CKPT     every stage x {SGD, AdamW} x {clip, accumulation}
                                 against a one-process full-batch reference; then
                                 3 steps at stage 3 and a checkpoint in CKPT; then a
                                 save that fails on the last rank must raise on every
                                 rank at once
    zero_train.py resume CKPT S  load CKPT at stage S on this many ranks, 2 more
                                 steps, compare with 5 uninterrupted reference steps
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from model import forward_backward, init_units, local_gather, make_data  # noqa: E402

from collectives import Communicator  # noqa: E402
from sharding import SGD, AdamW, ZeroOptimizer  # noqa: E402

SIZES, BATCH = [6, 20, 13, 5], 24
NAMES = [f"layer{i}" for i in range(3)]
X, Y = make_data(BATCH, 6, 5)
OPTS = {"sgd": lambda: SGD(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
        "adamw": lambda: AdamW(lr=1e-2, weight_decay=0.01)}


def reference(opt_name, clip, steps):
    """One process, full batch, the optimizer kernels applied per tensor."""
    w = init_units(SIZES)
    o = OPTS[opt_name]()
    state = {(u, k): {n: np.zeros(v.size, np.float32) for n in o.state_names()} for u, d in w.items() for k, v in d.items()}
    for step in range(1, steps + 1):
        grads = {}
        forward_backward(local_gather(w), lambda u, g: grads.__setitem__(u, g), NAMES, X, Y)
        norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for d in grads.values() for g in d.values()))
        scale = min(float(np.float32(clip) / (np.float32(norm) + np.float32(1e-6))), 1.0) if clip else 1.0
        for u, d in w.items():
            for k, v in d.items():
                p = v.reshape(-1)
                o.update(p, grads[u][k].reshape(-1).astype(np.float32), state[u, k], step, grad_scale=scale)
    return w


def train(comm, stage, opt_name, clip=None, accum=1, steps=3, load=None, save=None):
    opt = ZeroOptimizer(init_units(SIZES), comm, stage, OPTS[opt_name](), max_grad_norm=clip)
    if load:
        opt.load_checkpoint(load)
    n = BATCH // comm.size
    m = n // accum
    xs, ys = X[comm.rank * n:(comm.rank + 1) * n], Y[comm.rank * n:(comm.rank + 1) * n]
    for _ in range(steps):
        for a in range(accum):
            forward_backward(opt.gather, opt.reduce_grads, NAMES, xs[a * m:(a + 1) * m], ys[a * m:(a + 1) * m],
                             grad_factor=1.0 / accum)
        opt.step()
    if save:
        opt.save_checkpoint(save)
    return opt.full_params()


def check(comm, got, want, label):
    err = max(float(np.max(np.abs(got[u][k] - want[u][k]) / (np.abs(want[u][k]) + 1e-1))) for u in want for k in want[u])
    ok = all(np.allclose(got[u][k], want[u][k], rtol=1e-6, atol=1e-7) for u in want for k in want[u])
    print(f"rank {comm.rank} {'OK' if ok else 'FAIL'} {label} max rel err {err:.2e}", flush=True)
    return ok


def failed_save(comm, ckpt):
    """The last rank cannot write its shard: every rank raises SaveError, well before the timeout."""
    from sharding.checkpoint import SaveError
    opt = ZeroOptimizer(init_units(SIZES), comm, 3, OPTS["adamw"]())

    def hook(path):
        raise OSError(28, "No space left on device", str(path))
    t0 = time.monotonic()
    try:
        opt.save_checkpoint(ckpt, hook=hook if comm.rank == comm.size - 1 else None)
        err = None
    except SaveError as e:
        err = e
    took = time.monotonic() - t0
    ok = err is not None and (comm.rank == comm.size - 1 or f"rank {comm.size - 1}" in str(err)) and took < 10
    print(f"rank {comm.rank} {'OK' if ok else 'FAIL'} failed save raised in {took:.2f} s: {err}", flush=True)
    return ok


def main():
    comm = Communicator()
    mode, ckpt = sys.argv[1], sys.argv[2]
    ok = True
    if mode == "train":
        for opt_name in ("sgd", "adamw"):
            for clip, accum in ((None, 1), (0.5, 2)):
                want = reference(opt_name, clip, 3)
                for stage in range(4):
                    got = train(comm, stage, opt_name, clip, accum)
                    ok &= check(comm, got, want, f"n={comm.size} stage={stage} {opt_name} clip={clip} accum={accum}")
        train(comm, 3, "adamw", steps=3, save=ckpt)
        ok &= failed_save(comm, ckpt)
    else:
        stage = int(sys.argv[3])
        got = train(comm, stage, "adamw", steps=2, load=ckpt)
        ok &= check(comm, got, reference("adamw", None, 5), f"resume n={comm.size} stage={stage}")
    comm.close()
    sys.exit(0 if ok else 1)


main()
