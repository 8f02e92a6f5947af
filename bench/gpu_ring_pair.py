"""Two processes, one GPU: the kernel ring's setup probe, and the ring itself when the probe passes.

    python bench/gpu_ring_pair.py --mps auto|yes|no [--expect ok|refused] [--bytes 64M] [--json PATH]

Starts two worker processes (this file with --worker), which meet through a file-based
allgather in a temporary folder (the bootstrap: used at setup only), map each other's
workspace through CUDA IPC (Ring.connect) and decide co-residency (residency.processes):
--mps no refuses outright; --mps yes claims MPS and lets the handshake probe decide
(without a daemon, time-sliced contexts cannot make its 64 round trips in 100 ms, so it
must refuse cleanly); auto looks for the daemon's pipe. When both accept, each rank
runs float32 all-reduces of --bytes and of 64 KiB, checks them bit for bit against the
ring's order (each worker makes both inputs from their seeds) and times them.
Prints one INFO line per rank and one PASS/FAIL line ``gpu-ring-pair``; bench/gpu_check.sh's
kring step runs it without and with an MPS daemon. On the host stand-in for cupy
(bench/stand_in.py) the two processes share no memory: --mps no (refused before any probe)
runs there; --mps yes and auto print "INFO gpu-ring-pair ...: not on the host stand-in".
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.append(str(HERE))
from gpu_ring import make_backend, parse_size  # noqa: E402
from stand_in import not_on_host, on_host_stand_in  # noqa: E402

from collectives.gpu_ring import plan, reference  # noqa: E402
from collectives.gpu_ring.ring import Ring  # noqa: E402


def file_allgather(folder: Path, rank: int, world: int, timeout: float = 60.0):
    """An allgather of bytes through files: call k writes gather-k-rank, then reads every rank's."""
    calls = [0]

    def allgather(data: bytes) -> list[bytes]:
        k = calls[0]
        calls[0] += 1
        tmp = folder / f".gather-{k}-{rank}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, folder / f"gather-{k}-{rank}")
        deadline = time.monotonic() + timeout
        paths = [folder / f"gather-{k}-{r}" for r in range(world)]
        while not all(p.exists() for p in paths):
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {rank}: bootstrap allgather {k} timed out")
            time.sleep(0.005)
        return [p.read_bytes() for p in paths]
    return allgather


def worker(args) -> int:
    import cupy as cp
    backend, _ = make_backend(cp)
    rank = args.worker
    mps = {"yes": True, "no": False, "auto": None}[args.mps]
    ring = Ring.connect(backend, rank, 2, file_allgather(Path(args.dir), rank, 2), gpu_partner=1 - rank, mps=mps)
    out = dict(rank=rank, ok=ring.residency.ok, mode=ring.residency.mode, reason=ring.residency.reason, calls=[])
    if ring.residency.ok:
        for S in (parse_size(args.bytes), 64 << 10):
            count = S // 4
            counts = plan.split_counts(count, 2, 16)
            xs = [(np.random.default_rng(100 + r).standard_normal(count, dtype=np.float32) * 4) for r in range(2)]
            x, o = cp.asarray(xs[rank]), cp.empty(count, np.float32)
            ring.run("all_reduce", [x.data.ptr], [o.data.ptr], counts, np.float32, "sum")
            why = reference.same(o.get(), reference.expected("all_reduce", xs, counts, "sum")[rank])
            t0 = time.perf_counter()
            for _ in range(args.iters):
                ring.run("all_reduce", [x.data.ptr], [o.data.ptr], counts, np.float32, "sum")
            t = (time.perf_counter() - t0) / args.iters
            out["calls"].append(dict(bytes=S, kernel=ring.last["kernel"], seconds=t, exact=why is None, why=why))
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mps", choices=("auto", "yes", "no"), default="auto")
    ap.add_argument("--expect", choices=("ok", "refused", "any"), default="any")
    ap.add_argument("--bytes", default="64M")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        return worker(args)
    if args.mps != "no" and on_host_stand_in():
        print(not_on_host(f"gpu-ring-pair (--mps {args.mps}, expect {args.expect})",
                          "its two processes share no memory, so the handshake probe and the ring across "
                          "them need a GPU (CUDA IPC)"))
        return 0
    with tempfile.TemporaryDirectory(prefix="rz-pair-") as d:
        cmd = [sys.executable, __file__, "--mps", args.mps, "--bytes", args.bytes, "--iters", str(args.iters), "--dir", d]
        procs = [subprocess.Popen([*cmd, "--worker", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        outs = [p.communicate(timeout=240) for p in procs]
    results = []
    for r, (p, (so, se)) in enumerate(zip(procs, outs)):
        line = next((ln for ln in so.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"FAIL gpu-ring-pair: rank {r} exited {p.returncode} without a result:\n{se[-2000:]}")
            return 1
        res = json.loads(line[7:])
        results.append(res)
        calls = ", ".join(f"{c['bytes']} B {c['kernel']} {c['seconds'] * 1e6:.1f} us{'' if c['exact'] else ' WRONG'}"
                          for c in res.get("calls", []))
        print(f"INFO gpu-ring-pair rank {r} (--mps {args.mps}): {'accepted' if res['ok'] else 'refused'}: "
              f"{res['reason']}{'; ' + calls if calls else ''}")
    accepted = [res["ok"] for res in results]
    exact = all(c["exact"] for res in results for c in res.get("calls", []))
    agreed = len(set(accepted)) == 1
    want = {"ok": [True, True], "refused": [False, False], "any": accepted}[args.expect]
    good = agreed and accepted == want and exact
    print(f"{'PASS' if good else 'FAIL'} gpu-ring-pair (--mps {args.mps}, expect {args.expect}): "
          f"{'both accepted' if all(accepted) else 'both refused' if not any(accepted) else 'the ranks disagree'}"
          f"{'' if exact else ', results wrong'}")
    if args.json:
        path = Path(args.json)
        old = json.loads(path.read_text()) if path.exists() else {}
        old.setdefault("pair", {})[args.mps] = results
        path.write_text(json.dumps(old, indent=1))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
