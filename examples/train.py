"""Train the numpy MLP of examples/model.py with ZeroOptimizer, unit by unit.

    mpirun -n 4 python examples/train.py --stage 3
    mpirun -n 2 python examples/train.py --stage 2 --hidden 64 --layers 2 --steps 5 --dtype bfloat16

Each rank trains on ``--batch`` samples per step (the global batch is
``--batch`` times the number of ranks, so the defaults work at any rank
count); the loss printed is the global mean. Prints the memory report (beside the ZeRO estimate) and,
at stages 2-3, how long step() still waited for gradient reduce-scatters
that ran during the backward.
"""
from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np
from model import forward_backward, init_units, make_data

from collectives import Communicator
from sharding import SGD, AdamW, ZeroOptimizer, estimate_memory
from sharding.memory import format_report


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", type=int, default=3, choices=[0, 1, 2, 3])
    ap.add_argument("--hidden", type=int, default=256, help="width of the hidden layers (the model size)")
    ap.add_argument("--layers", type=int, default=4, help="number of hidden layers")
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per step (global batch: this x ranks)")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip", type=float, default=1.0, help="max global gradient norm (0: off)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    ap.add_argument("--checkpoint", default=None, help="save here at the end")
    a = ap.parse_args(argv)

    comm = Communicator()
    sizes = [a.inputs] + [a.hidden] * a.layers + [a.classes]
    units = init_units(sizes, seed=0)
    names = list(units)
    opt_desc = AdamW(lr=a.lr) if a.optimizer == "adamw" else SGD(lr=a.lr, momentum=0.9)
    dtype = {"float32": None, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[a.dtype]
    opt = ZeroOptimizer(units, comm, a.stage, opt_desc, param_dtype=dtype, max_grad_norm=a.clip or None)
    del units  # from here on the optimizer owns the weights
    if a.batch < 1:
        raise SystemExit(f"--batch must be >= 1 sample per rank, got {a.batch}")
    n, global_batch = a.batch, a.batch * comm.size
    x, y = make_data(global_batch * a.steps, a.inputs, a.classes)
    nparams = sum(u.layout.num_params for u in opt.units.values())
    if comm.rank == 0:
        print(f"ZeRO stage {a.stage} on {comm.size} ranks, {nparams:,} parameters, {a.optimizer}, {a.dtype}, "
              f"batch {n} per rank ({global_batch} global)")
    t_backward = t_step = 0.0
    for step in range(a.steps):
        b = step * global_batch + comm.rank * n
        t0 = time.perf_counter()
        loss = forward_backward(opt.gather, opt.reduce_grads, names, x[b:b + n], y[b:b + n],
                                loss_scale=opt.loss_scale)
        t1 = time.perf_counter()
        norm = opt.step()
        t2 = time.perf_counter()
        t_backward, t_step = t_backward + t1 - t0, t_step + t2 - t1
        mean = comm.all_reduce(np.array([loss], np.float64), op="avg")[0]
        if comm.rank == 0:
            print(f"step {step + 1:4d}  loss {mean:.4f}  grad norm {norm:.4f}  ({(t2 - t0) * 1e3:.1f} ms)")
    rep = opt.memory_report()
    pb = 4 if dtype is None else 2
    est = estimate_memory(nparams, comm.size, a.stage, param_bytes=pb,
                          grad_bytes=opt.reduce_dtype.itemsize, state_bytes=4 * len(opt_desc.state_names()))
    if comm.rank == 0:
        print(f"memory on rank 0 (ZeRO stage {a.stage}):\n{format_report(rep, est)}")
        s = opt.stats
        if a.stage >= 2:
            print(f"forward+backward {t_backward:.3f} s, step {t_step:.3f} s; step() waited {s['grad_wait_s']:.4f} s "
                  f"for gradient reduce-scatters; {s['reduce_done_before_step']} of {s['reduce_launched']} "
                  f"had finished during the backward")
    if a.checkpoint:
        path = opt.save_checkpoint(a.checkpoint)
        if comm.rank == 0:
            print(f"checkpoint: {path}")
    comm.close()


if __name__ == "__main__":
    main()
