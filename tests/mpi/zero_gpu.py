"""ZeRO training on the GPU against the same training on the CPU (run by bench/gpu_check.sh).

    mpirun -n 2 python tests/mpi/zero_gpu.py [MODE]

MODE: the device transport ("auto", the default, is what users get: IPC on one node;
"staged" or "cuda_aware" by name). On the host stand-in for cupy (bench/stand_in.py), which
has no CUDA IPC, "auto" prints "INFO zero-auto: not on the host stand-in" and every case
runs staged.

For every stage (0-3) and optimizer (SGD with nesterov momentum, AdamW), the
model of examples/model.py trains 3 steps twice on the same ranks: once with
host (numpy) weights, once with device (cupy) weights, so the reductions run
through the device transport and the updates through the CUDA kernels. The
forward and backward stay in numpy for both (their gradients are identical
inputs). The final weights must agree to rtol 1e-6 (the gradient-norm dot
product is the one step whose summation order differs); rank 0 prints one
PASS/FAIL line per case and whether the two were bit for bit equal.
"""
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import cupy as cp
import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # appended: bench/collectives.py is not the package
from model import forward_backward, init_units, make_data  # noqa: E402
from stand_in import not_on_host, on_host_stand_in  # noqa: E402

from collectives import Communicator  # noqa: E402
from sharding import SGD, AdamW, ZeroOptimizer  # noqa: E402

SIZES, BATCH, STEPS = [6, 20, 13, 5], 24, 3
NAMES = [f"layer{i}" for i in range(len(SIZES) - 1)]
X, Y = make_data(BATCH, SIZES[0], SIZES[-1])
OPTS = {"sgd": lambda: SGD(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
        "adamw": lambda: AdamW(lr=1e-2, weight_decay=0.01)}


def train(comm, stage, opt_name, device):
    units = init_units(SIZES)
    if device:
        units = {u: {k: cp.asarray(v) for k, v in d.items()} for u, d in units.items()}
    opt = ZeroOptimizer(units, comm, stage, OPTS[opt_name](), max_grad_norm=1.0)

    @contextmanager
    def gather(u):
        with opt.gather(u) as p:
            yield {k: cp.asnumpy(v) if device else v for k, v in p.items()}

    def reduce_grads(u, grads):
        opt.reduce_grads(u, {k: cp.asarray(v) if device else v for k, v in grads.items()})

    n = BATCH // comm.size
    xs, ys = X[comm.rank * n:(comm.rank + 1) * n], Y[comm.rank * n:(comm.rank + 1) * n]
    for _ in range(STEPS):
        forward_backward(gather, reduce_grads, NAMES, xs, ys)
        opt.step()
    return opt.full_params()


def communicator(mode):
    if mode == "auto":
        return Communicator(timeout=10)
    from collectives.transport.device import make_device_transport
    from collectives.bootstrap.mpi import MpiBootstrap
    return Communicator(transport=make_device_transport(MpiBootstrap(MPI.COMM_WORLD).transport(), mode), timeout=10)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "auto"
    if mode == "auto" and on_host_stand_in(cp):
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(not_on_host("zero-auto", "auto picks CUDA IPC on one node, which the stand-in lacks: "
                                           "every case runs through the staged transport"), flush=True)
        mode = "staged"
    comm = communicator(mode)
    rank = comm.rank
    cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
    failed = False
    for opt_name in ("sgd", "adamw"):
        for stage in range(4):
            t0 = time.perf_counter()
            try:
                cpu = train(comm, stage, opt_name, device=False)
                gpu = train(comm, stage, opt_name, device=True)
                err = max(float(np.max(np.abs(gpu[u][k] - cpu[u][k]))) for u in cpu for k in cpu[u])
                exact = all(np.array_equal(gpu[u][k], cpu[u][k]) for u in cpu for k in cpu[u])
                ok = all(np.allclose(gpu[u][k], cpu[u][k], rtol=1e-6, atol=1e-7) for u in cpu for k in cpu[u])
                why = f"max abs diff {err:.1e}, {'bit for bit' if exact else 'not bit for bit'}"
            except Exception as e:  # noqa: BLE001: one line per case, the next still runs
                ok, why = False, f"{type(e).__name__}: {e}"
            whys = MPI.COMM_WORLD.allgather("" if ok else why)
            ok_all = not any(whys)
            if not ok_all:  # the root cause first: a rank's own error before the timeouts it caused
                why = min((("Timeout" in w), i, w) for i, w in enumerate(whys) if w)
                why = f"rank {why[1]}: {why[2]}"
            if rank == 0:
                print(f"{'PASS' if ok_all else 'FAIL'} zero-stage{stage}-{opt_name}: {STEPS} steps on {comm.size} "
                      f"ranks ({mode} transport), GPU vs CPU weights: {why} ({time.perf_counter() - t0:.1f} s)",
                      flush=True)
            failed |= not ok_all
            if not ok_all:  # a failed collective leaves the communicator unusable: a fresh one, staged if
                comm.close()  # the default (IPC on one node) is what failed, so the other cases still say something
                mode = "staged" if mode == "auto" else mode
                comm = communicator(mode)
    comm.close()
    sys.exit(1 if failed else 0)


main()
