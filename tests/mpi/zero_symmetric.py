"""Run under mpirun: ZeroOptimizer with its buffers in the symmetric heap (sharding/heap.py).

Stages 0-3, float32 and bfloat16 compute, with gradient accumulation (two
micro-batches per step, so stage 2-3's reduce-scatter pool is reused while a
reduce-scatter is in flight), trained once with plain arrays and once in the
heap on one ring Communicator: the weights must agree, the heap run's
reduce-scatters, all-gathers and gradient all-reduces must all have read the
peers' buffers directly (trace phases "direct ..."), the plain run's none; a
checkpoint saved from the heap run loads into a heap optimizer and a plain
one, and both then step alike. Prints one JSON line per rank:
{"rank", "cases", "failures", "maxdiff", "exact"}. Ranks that disagree
about the heap raise ValueError on every rank.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from model import forward_backward, init_units, make_data  # noqa: E402

from collectives import Communicator  # noqa: E402
from collectives.teach.trace import Tracer  # noqa: E402
from sharding import AdamW, ZeroOptimizer  # noqa: E402

# layer1 is 256 x 200 float32 (200 KB): past the ring's small-message paths, so the
# plain run goes around the ring
SIZES, BATCH, NAMES = [24, 256, 200, 5], 24, [f"layer{i}" for i in range(3)]
X, Y = make_data(BATCH, SIZES[0], SIZES[-1])
ckpt = sys.argv[1]
os.environ["COLLECTIVES_STAGE"] = "0"  # the plain run takes the ring (two ranks stage ordinary arrays by default)
comm = Communicator(timeout=60)
failures, cases, maxdiff, exact = [], 0, 0.0, True


def train(stage, symmetric, dtype, steps=2):
    opt = ZeroOptimizer(init_units(SIZES), comm, stage, AdamW(lr=1e-2, weight_decay=0.01), param_dtype=dtype,
                        symmetric=symmetric)
    xs, ys = X[comm.rank::comm.size], Y[comm.rank::comm.size]
    half = len(xs) // 2
    comm.tracer = Tracer()
    for _ in range(steps):
        for lo, hi in ((0, half), (half, len(xs))):  # two micro-batches per step
            forward_backward(opt.gather, opt.reduce_grads, NAMES, xs[lo:hi], ys[lo:hi], grad_factor=0.5)
        opt.step()
    phases = {}
    for e in comm.tracer.data_events():
        kind = e["label"].split(" #")[0]
        phases.setdefault(kind, set()).add(str(e.get("phase", "")).startswith("direct"))
    comm.tracer = None
    return opt, phases


def compare(tag, a, b, tol):
    global cases, maxdiff, exact
    for u in a:
        for k in a[u]:
            cases += 1
            d = float(np.max(np.abs(a[u][k] - b[u][k])))
            maxdiff, exact = max(maxdiff, d), exact and d == 0
            if not np.allclose(a[u][k], b[u][k], rtol=tol, atol=tol):
                failures.append(f"{tag} {u}.{k}: differ by up to {d:g}")


for stage in range(4):
    for dtype in ("float32", "bfloat16"):
        tag = f"stage {stage} {dtype}"
        try:
            plain, plain_ph = train(stage, False, dtype)
            heap, heap_ph = train(stage, True, dtype)
        except Exception as e:
            failures.append(f"{tag}: {type(e).__name__}: {e}")
            continue
        # two ranks: one addition, the same bits either way (the test asserts "exact");
        # three: the ring and the direct path add in different orders (float32 rounding)
        compare(f"{tag} heap vs plain", heap.full_params(), plain.full_params(), 1e-6)
        if plain.symmetric or not heap.symmetric:
            failures.append(f"{tag}: symmetric flags {plain.symmetric}, {heap.symmetric}")
        grads = "all_reduce" if stage == 0 else "reduce_scatter"
        gathers = ["all_gather"] if stage else []
        for kind in [grads] + gathers:  # every call of these kinds read peers directly, or none did
            if heap_ph.get(kind) != {True}:
                failures.append(f"{tag}: heap run's {kind} phases direct={heap_ph.get(kind)}")
            if plain_ph.get(kind) != {False}:
                failures.append(f"{tag}: plain run's {kind} phases direct={plain_ph.get(kind)}")
        rep = heap.memory_report()
        if not rep["total"] > 0 or (stage >= 2 and rep["comm"] < heap.reducer.pool.nbytes()):
            failures.append(f"{tag}: memory report {rep}")
        if dtype == "float32" and stage in (1, 3):  # a checkpoint of the heap run loads either way
            path = heap.save_checkpoint(f"{ckpt}-{stage}")
            again = [ZeroOptimizer(init_units(SIZES, seed=5), comm, s, AdamW(lr=1e-2), symmetric=sym)
                     for s, sym in ((stage, True), (3 - stage, False))]
            for opt in again:
                opt.load_checkpoint(path)
                compare(f"{tag} loaded (stage {opt.stage}, symmetric {opt.symmetric})",
                        opt.full_params(), heap.full_params(), 0)
            xs, ys = X[comm.rank::comm.size], Y[comm.rank::comm.size]
            for opt in again + [heap]:
                forward_backward(opt.gather, opt.reduce_grads, NAMES, xs, ys)
                opt.step()
            compare(f"{tag} step after load", again[0].full_params(), heap.full_params(), 0)
            compare(f"{tag} step after load, plain", again[1].full_params(), heap.full_params(), 1e-5)

# ranks that disagree about the heap raise on every rank before allocating (a collective without a deadline)
try:
    ZeroOptimizer(init_units(SIZES), comm, 2, AdamW(lr=1e-2), symmetric=comm.rank == 0)
    failures.append("symmetric on rank 0 only: no error")
except ValueError as e:
    cases += 1
    if "symmetric differs (rank 0: True; rank 1: False" not in str(e):
        failures.append(f"symmetric on rank 0 only: {e}")

print(json.dumps({"rank": comm.rank, "cases": cases, "failures": failures[:10], "nfail": len(failures),
                  "maxdiff": maxdiff, "exact": exact}), flush=True)
comm.close()
