"""The GPU kernel ring on one GPU: virtual ranks, bit for bit against the host ring, busbw vs a copy.

    python bench/gpu_ring.py [--ranks 2,4,8] [-b 4K] [-e 256M] [-f 4] [--dtypes float32,bfloat16]
                             [--iters 5] [--copy-bytes 1G] [--check-max 16M] [--json PATH]

N virtual ranks in this process share the GPU (collectives.gpu_ring.Ring.virtual: one
cooperative launch, or one launch per rank on its own stream). For every N, dtype,
collective (all-reduce, reduce-scatter, all-gather; the ring in slot mode, and direct
mode for the two with an all-gather half) and size S (the whole buffer, nccl-tests'
sense) it checks the output bit for bit against collectives/gpu_ring/reference.py (the
host ring's order): every element up to --check-max, above it every segment's and
channel part's edges plus 64 Ki random elements; then times --iters calls.

The roofline: a device-to-device copy of --copy-bytes (>= 1 GiB) in this process alone,
measured in the same run, as bytes read + written per second. Each row gives algbw
(S / t), busbw (algbw x 2(n-1)/n or (n-1)/n) and two efficiencies, (bytes / t) / copy:
on minimal bytes (every rank's input read once, output written once) and on actual
bytes (the slot traffic too, plan.traffic). Then the all-reduce latency per call,
launch and synchronize included, at --latency sizes for each kernel (one-shot,
two-shot, ring): the crossovers tuning.py should take. Lines: INFO per row, one
PASS/FAIL "gpu-ring-exact"; --json writes every row.

On the host stand-in for cupy (bench/stand_in.py) the kernels run on CPU threads
(collectives/gpu_ring/host.py, 4 threads a block, 4 channels): the script's logic and the
kernels' results, end to end, with host sizes (gpu_check.sh's); its timings mean nothing.
No figure in this file's docstrings or comments has been measured.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.append(str(HERE))  # appended: bench/collectives.py is not the package
from stand_in import on_host_stand_in  # noqa: E402
from collectives.dtypes import DTYPES  # noqa: E402
from collectives.errors import CollectiveTimeout  # noqa: E402
from collectives.gpu_ring import plan, reference, tuning  # noqa: E402
from collectives.gpu_ring.ring import Ring, default_geometry  # noqa: E402

BUSBW = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
         "all_gather": lambda n: (n - 1) / n}


def parse_size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def make_backend(cp):
    """The cupy backend on a GPU; on the host stand-in, the kernels' host build."""
    if on_host_stand_in(cp):
        from collectives.gpu_ring.host import HostBackend
        return HostBackend(block=4), True
    from collectives.gpu_ring.backend import CupyBackend
    return CupyBackend(cp), False


def copy_roofline(cp, nbytes: int, iters: int) -> float:
    """Bytes read + written per second by a device-to-device copy of ``nbytes``."""
    a, b = cp.empty(nbytes, np.uint8), cp.empty(nbytes, np.uint8)
    s = cp.cuda.Stream.null
    cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, 3, s.ptr)
    s.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, 3, s.ptr)
    s.synchronize()
    return 2 * nbytes * iters / (time.perf_counter() - t0)


class Inputs:
    """One pool of inputs per dtype for the largest rank count and size, sliced per case: random
    values (a different stream per rank) repeating every 4 Mi elements, so that 8 ranks of 256 MiB
    of bfloat16 take seconds to make, not minutes."""

    PERIOD = 1 << 22

    def __init__(self, dtype, ranks: int, count: int, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.host = [np.resize((rng.standard_normal(min(count, self.PERIOD), dtype=np.float32) * 4).astype(dtype),
                               count) for _ in range(ranks)]

    def get(self, r: int, count: int) -> np.ndarray:
        return self.host[r][:count]


def wire(dtype) -> np.dtype:
    """What a device buffer of ``dtype`` holds on cupy (bfloat16 travels as its 16-bit patterns)."""
    return np.dtype(np.uint16) if np.dtype(dtype).itemsize == 2 else np.dtype(dtype)


def check(cp, coll: str, xs: list[np.ndarray], outs, counts: list[int], op, dtype, full: bool, seed: int) -> int:
    """Wrong elements over every rank: all of them when ``full``, else edges and a random sample."""
    n, total = len(xs), sum(counts)
    offs = plan.offsets(counts)
    wrong = 0
    if full:
        want = reference.expected(coll, xs, counts, op)
        for r in range(n):
            got = outs[r].get().view(dtype)
            why = reference.same(got, want[r])
            wrong += 0 if why is None else int(why.split(" of ")[0])
        return wrong
    rng = np.random.default_rng(seed)
    for r in range(n):
        lo, hi = (offs[r], offs[r + 1]) if coll == "reduce_scatter" else (0, total)
        edges = np.concatenate([np.arange(max(lo, o - 2048), min(hi, o + 2048)) for o in offs] + [
            rng.integers(lo, hi, 65536)]) if hi > lo else np.zeros(0, np.int64)
        g = np.unique(edges[(edges >= lo) & (edges < hi)])
        got = outs[r][cp.asarray(g - lo)].get().view(dtype) if g.size else np.zeros(0, dtype)
        seg = np.searchsorted(offs, g, side="right") - 1
        want = np.empty(g.size, dtype)
        for s in np.unique(seg):
            m = seg == s
            if coll == "all_gather":
                want[m] = xs[s][g[m] - offs[s]]
            else:
                want[m] = reference.ring_fold(op, [x[g[m]] for x in xs], int(s))
        why = reference.same(got, want)
        wrong += 0 if why is None else int(why.split(" of ")[0])
    return wrong


def run_case(cp, ring: Ring, coll: str, dtype, S: int, pool: Inputs, direct: bool, iters: int, check_max: int,
             copy_bw: float, kernel: str | None = None) -> dict:
    n, item = ring.world, np.dtype(dtype).itemsize
    count = S // item
    op = None if coll == "all_gather" else "sum"
    counts = plan.split_counts(count, n, max(1, 64 // item))
    xs = [pool.get(r, counts[r] if coll == "all_gather" else count) for r in range(n)]
    w = wire(dtype)
    xd = [cp.asarray(x.view(w)) for x in xs]
    od = [cp.empty(counts[r] if coll == "reduce_scatter" else count, w) for r in range(n)]
    xp, op_ = [a.data.ptr for a in xd], [a.data.ptr for a in od]
    right = [op_[(r + 1) % n] for r in range(n)] if direct else None
    ring.run(coll, xp, op_, counts, dtype, op, kernel=kernel, right_outs=right)
    wrong = check(cp, coll, xs, od, counts, op, dtype, S <= check_max, seed=S + n)
    t0 = time.perf_counter()
    for _ in range(iters):
        streams = ring.launch(coll, xp, op_, counts, dtype, op, kernel=kernel, right_outs=right)
    ring.wait(streams)
    t = (time.perf_counter() - t0) / iters
    kind = ring.last["kernel"]
    minimal = sum(plan.traffic(coll, counts, r, item, direct, kernel=kind)[0] for r in range(n))
    actual = sum(plan.traffic(coll, counts, r, item, direct, kernel=kind)[1] for r in range(n))
    algbw = S / t
    return dict(n=n, collective=coll, dtype=np.dtype(dtype).name, bytes=S, direct=direct, kernel=ring.last["kernel"],
                channels=ring.last["channels"], mode=ring.last["mode"], seconds=t, algbw=algbw,
                busbw=algbw * BUSBW[coll](n), eff_min=minimal / t / copy_bw, eff_actual=actual / t / copy_bw,
                minimal_bytes=minimal, actual_bytes=actual, wrong=wrong, checked="all" if S <= check_max else "sample")


def latency(cp, ring: Ring, S: int, kernel: str, iters: int, pool: Inputs) -> dict:
    """Seconds per all-reduce call of S bytes of float32, launch and synchronize included."""
    n, count = ring.world, S // 4
    counts = plan.split_counts(count, n, 16)
    xs = [pool.get(r, count) for r in range(n)]
    xd = [cp.asarray(x) for x in xs]
    od = [cp.empty(count, np.float32) for _ in range(n)]
    args = ("all_reduce", [a.data.ptr for a in xd], [a.data.ptr for a in od], counts, np.float32, "sum")
    ring.run(*args, kernel=kernel)
    wrong = check(cp, "all_reduce", xs, od, counts, "sum", np.float32, True, 0)
    t0 = time.perf_counter()
    for _ in range(iters):
        ring.run(*args, kernel=kernel)
    return dict(n=n, bytes=S, kernel=kernel, seconds=(time.perf_counter() - t0) / iters, wrong=wrong)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("-b", "--minbytes", default="4K")
    ap.add_argument("-e", "--maxbytes", default="256M")
    ap.add_argument("-f", "--factor", type=int, default=4)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--copy-bytes", default="1G")
    ap.add_argument("--check-max", default="16M", help="largest size checked on every element (above: a sample)")
    ap.add_argument("--latency", default="4K,16K,64K", help="all-reduce sizes timed per call, each kernel")
    ap.add_argument("--timeout", type=float, default=10.0, help="the deadline of every wait on the device (s)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import cupy as cp
    backend, on_host = make_backend(cp)
    ranks = [int(r) for r in args.ranks.split(",")]
    dtypes = [DTYPES[d][0] for d in args.dtypes.split(",")]
    sizes, s = [], parse_size(args.minbytes)
    while s <= parse_size(args.maxbytes):
        sizes.append(s)
        s *= args.factor
    copy_bytes = parse_size(args.copy_bytes)
    copy_bw = copy_roofline(cp, copy_bytes, 3 if on_host else 10)
    note = "" if copy_bytes >= 1 << 30 else " (under 1 GiB: not the roofline the issue asks for)"
    print(f"INFO gpu-ring-roofline: device-to-device copy of {copy_bytes} B: {copy_bw / 1e9:.1f} GB/s read+write{note}"
          f"{' [host stand-in: timings mean nothing]' if on_host else ''}")
    geo = default_geometry() if not on_host else None
    rows, lat = [], []
    lat_sizes = [parse_size(x) for x in args.latency.split(",") if x]
    most = max(sizes + lat_sizes)
    pools = {np.dtype(d): Inputs(d, max(ranks), most // np.dtype(d).itemsize) for d in dtypes}
    lat_pool = pools.get(np.dtype(np.float32)) or Inputs(np.float32, max(ranks), most // 4)
    for n in ranks:
        ring = Ring.virtual(backend, n, geo or _host_geometry(), timeout_s=args.timeout)
        print(f"INFO gpu-ring n={n}: {ring.residency.reason}")
        for d in dtypes:
            for coll in ("all_reduce", "reduce_scatter", "all_gather"):
                for direct in ((False, True) if coll != "reduce_scatter" else (False,)):
                    for S in sizes:
                        try:
                            row = run_case(cp, ring, coll, d, S, pools[np.dtype(d)], direct, args.iters,
                                           parse_size(args.check_max), copy_bw, kernel="ring" if direct else None)
                        except CollectiveTimeout as e:  # the ring reset itself: report, go on
                            print(f"FAIL gpu-ring n={n} {coll} {np.dtype(d).name} {S} B: {e}")
                            rows.append(dict(n=n, collective=coll, bytes=S, wrong=-1, error=str(e)))
                            continue
                        rows.append(row)
                        print(f"INFO gpu-ring n={n} {coll:<14} {row['dtype']:<8} {S:>10} B {'direct' if direct else 'slots '} "
                              f"{row['kernel']:<7} ch={row['channels']:<2} {row['seconds'] * 1e6:10.1f} us "
                              f"algbw {row['algbw'] / 1e9:7.2f} busbw {row['busbw'] / 1e9:7.2f} GB/s "
                              f"eff min {row['eff_min']:6.1%} actual {row['eff_actual']:6.1%} wrong {row['wrong']}")
        for S in lat_sizes:
            for kernel in ("oneshot", "twoshot", "ring"):
                if kernel != "ring" and S > ring.geometry.stage_bytes:
                    continue
                try:
                    r = latency(cp, ring, S, kernel, 2 if on_host else max(args.iters, 50), lat_pool)
                except CollectiveTimeout as e:
                    print(f"FAIL gpu-ring-latency n={n} {S} B {kernel}: {e}")
                    r = dict(n=n, bytes=S, kernel=kernel, seconds=float("nan"), wrong=-1, error=str(e))
                lat.append(r)
                print(f"INFO gpu-ring-latency n={n} all_reduce {S:>7} B {kernel:<7} {r['seconds'] * 1e6:9.1f} us per call "
                      f"(launch + sync) wrong {r['wrong']}")
    bad = [r for r in rows + lat if r["wrong"]]
    total = len(rows) + len(lat)
    word = "PASS" if not bad else "FAIL"
    print(f"{word} gpu-ring-exact: {total - len(bad)} of {total} calls bit for bit equal to the host ring's order"
          f" (N={args.ranks}, {args.dtypes}, {args.minbytes}-{args.maxbytes})")
    if args.json:
        out = Path(args.json)
        old = json.loads(out.read_text()) if out.exists() else {}
        old.update(roofline_bytes_per_s=copy_bw, copy_bytes=copy_bytes, rows=rows, latency=lat, host_stand_in=on_host)
        out.write_text(json.dumps(old, indent=1))
    return 0 if not bad else 1


def _host_geometry():
    from collectives.gpu_ring import layout
    return layout.Geometry(channels=4, slots=4, slot_bytes=256, stage_bytes=tuning.STAGE_BYTES)


if __name__ == "__main__":
    sys.exit(main())
