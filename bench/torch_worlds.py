"""A heap all-reduce through torch, under torchrun (a store world) and under mpirun (an MPI world).

    python bench/torch_worlds.py --np 2 --reps 5 --json bench/results/.../worlds-n2.json

launches this file ``--reps`` times each way, alternating (mpirun, torchrun,
mpirun, ...; ``--bound`` adds torchrun with every rank bound to one core, as
mpirun binds them), so every way meets the same machine state; every launch times
``dist.all_reduce`` in place on ``collectives.torch_backend.alloc`` tensors of
64 KiB, 1 MiB and 16 MiB (float32) and prints one JSON line. The summary gives,
per size, the median over launches of each launch's median call, and the ratio
torchrun / mpirun.

    torchrun --nproc-per-node 2 bench/torch_worlds.py --measure   # one launch by hand
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (64 << 10, 1 << 20, 16 << 20)
CALLS = {64 << 10: 400, 1 << 20: 200, 16 << 20: 30}  # per block; 7 blocks per size


def measure() -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT))
    import collectives.torch_backend as rz

    if os.environ.get("RZ_BIND"):  # one core per rank, as mpirun binds them (torchrun does not)
        os.sched_setaffinity(0, {int(os.environ["LOCAL_RANK"]) % os.cpu_count()})
    dist.init_process_group("ringzero")
    pg = dist.group.WORLD
    out = {"world": rz.world().kind, "ranks": dist.get_world_size(), "us": {}, "road": {}}
    for nbytes in SIZES:
        t = rz.alloc((nbytes // 4,))
        t.zero_()  # sums of zeros stay zeros, call after call
        for _ in range(5):
            dist.all_reduce(t)
        blocks = []
        for _ in range(7):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(CALLS[nbytes]):
                dist.all_reduce(t)
            blocks.append((time.perf_counter() - t0) / CALLS[nbytes] * 1e6)
        out["us"][str(nbytes)] = statistics.median(blocks)
        out["road"][str(nbytes)] = str(pg.comm.road_taken())
    if dist.get_rank() == 0:
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(how: str, n: int) -> dict:
    bin_ = Path(sys.executable).parent
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_osc="^ucx", PYTHONPATH=str(ROOT))
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    me = [str(Path(__file__).resolve()), "--measure"]
    if how == "torchrun-bound":
        env["RZ_BIND"] = "1"
    if how == "mpirun":
        over = ["--oversubscribe"] if n > os.cpu_count() else []
        cmd = [str(bin_ / "mpirun"), *over, "-n", str(n), sys.executable, *me]
    else:
        cmd = [str(bin_ / "torchrun"), "--nproc-per-node", str(n), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", *me]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode or not lines:
        raise SystemExit(f"{how} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    got = json.loads(lines[-1])
    got["launcher"] = how
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="time this launch (run under a launcher)")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5, help="launches each way, alternating")
    ap.add_argument("--json", help="write every launch and the summary here")
    ap.add_argument("--bound", action="store_true",
                    help="also torchrun with each rank bound to one core (torchrun-bound), as mpirun binds")
    args = ap.parse_args()
    if args.measure:
        measure()
        return 0
    runs = []
    ways = ("mpirun", "torchrun") + (("torchrun-bound",) if args.bound else ())
    for i in range(args.reps):
        for how in ways if i % 2 == 0 else ways[::-1]:
            runs.append(launch(how, args.np))
            r = runs[-1]
            print(f"{how:8s} ({r['world']} world): " + ", ".join(
                f"{int(k) >> 10} KiB {v:.1f} us ({r['road'][k]})" for k, v in r["us"].items()), flush=True)
    summary = {}
    print(f"{'size':>8} " + " ".join(f"{h + ' us':>17}" for h in ways) + "   ratio(s) to mpirun")
    for nbytes in SIZES:
        k = str(nbytes)
        med = {h: statistics.median(r["us"][k] for r in runs if r["launcher"] == h) for h in ways}
        summary[k] = dict(med, **{f"ratio_{h}": med[h] / med["mpirun"] for h in ways[1:]})
        print(f"{nbytes >> 10:>5} KiB " + " ".join(f"{med[h]:>17.1f}" for h in ways) + "   " +
              " ".join(f"{summary[k]['ratio_' + h]:.3f}" for h in ways[1:]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"np": args.np, "reps": args.reps, "runs": runs, "summary": summary},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
