"""Every GPU ring kernel run from its own source on CPU threads, against the host ring's order.

    python bench/ring_on_host.py [-v] [--tsan] [--broken no-free-wait|early-post] [--missing]

csrc/ring/*.cu are compiled by g++ with csrc/ring/host_shim.h (collectives/gpu_ring/host.py), where
every GPU thread of every block of every rank is an OS thread, __syncthreads a barrier
per block and the counters atomics with the kernels' orders; the launches are
collectives.gpu_ring.Ring's own (its argument packing, kernel and channel choice). Each
case is one call on virtual ranks, compared bit for bit (NaN: positions) with
collectives/gpu_ring/reference.py, the host ring's order (itself checked against
collectives.simulate by tests/test_ring_reference.py).

The matrix: reduce-scatter, all-gather and all-reduce through the ring kernel for every
dtype and op; N = 2..5; 1..3 channels; slots of 16..64 bytes (2..4 per channel); 1..8
threads a block; even, uneven, empty and unaligned segments; one-shot and two-shot;
direct mode; in place. The calls of one N and geometry run on one Ring, one after
another, mixing collectives and kernels, so the counters carry over from call to call.

--tsan runs a subset under ThreadSanitizer (the script starts itself again with
LD_PRELOAD=libtsan.so) and counts its reports; --broken builds a deliberately broken
protocol (a sender that skips the free-slot wait; a counter published before the data
barrier) and counts the cases it gets wrong; --missing leaves one rank out and prints
what every other rank's CollectiveTimeout says. The last line is
``ring on host: K of N cases equal the reference``; exit status 0 iff K == N.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# the repository first: run as a script, bench/ is sys.path[0] and bench/collectives.py is not the package
sys.path.insert(0, str(HERE.parent))
from collectives.gpu_ring.host import HostBackend, HostBuffer, build, tsan_preload  # noqa: E402

from collectives.dtypes import DTYPES, KERNEL_DTYPES  # noqa: E402
from collectives.errors import CollectiveTimeout  # noqa: E402
from collectives.gpu_ring import layout, reference  # noqa: E402
from collectives.gpu_ring.plan import split_counts  # noqa: E402
from collectives.gpu_ring.ring import Ring  # noqa: E402
from collectives.gpu_ring.source import FILES, OPS  # noqa: E402

BROKEN = {"no-free-wait": "-DRZ_BROKEN_NO_FREE_WAIT", "early-post": "-DRZ_BROKEN_EARLY_POST"}
# (channels, slots, slot bytes, threads per block) per N: tiny slots, so every call runs many rounds
GEOMETRIES = ((1, 2, 16, 4), (3, 4, 64, 8), (2, 2, 48, 1))


def operand(dtype, count: int, seed: int) -> np.ndarray:
    """Inputs whose reduction depends on the order: random values, with specials up front."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(-1000, 1000, count).astype(dt)
        ext = np.array([info.max, info.min, -1, 0, 7], dt)[:count]
        x[:ext.size] = np.roll(ext, seed % 5)
        return x
    x = (rng.standard_normal(count) * 4).astype(np.float32)
    sp = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3e38, -3e38], np.float32)
    k = min(count, sp.size)
    x[:k] = np.roll(sp, seed % sp.size)[:k]
    with np.errstate(over="ignore"):  # 3e38 is inf in the half types: meant
        return x.astype(dt)


def at(ptr: int, count: int, dtype) -> np.ndarray:
    """The ``count`` elements of ``dtype`` at address ``ptr``, as a numpy view."""
    dt = np.dtype(dtype)
    return np.ctypeslib.as_array((ctypes.c_uint8 * (count * dt.itemsize)).from_address(ptr)).view(dt)


def counts_for(shape: str, count: int, n: int, itemsize: int, rng) -> list[int]:
    if shape == "even":
        return split_counts(count, n, max(1, 64 // itemsize))
    if shape == "empty":
        c = split_counts(count, n - 1) + [0]
        return c[-1:] + c[:-1] if n > 2 else [0, count]
    if shape == "none":
        return [0] * n
    return [int(v) for v in rng.integers(0, max(2, 2 * count // n), n)]  # uneven, odd sizes


class Harness:
    def __init__(self, backend: HostBackend, verbose: bool):
        self.backend, self.verbose = backend, verbose
        self.cases = self.ok = 0
        self.failures: list[str] = []

    def call(self, ring: Ring, collective: str, dtype, op, counts, *, kernel="ring", channels=None,
             direct=False, in_place=False, offset=0, seed=0) -> str | None:
        n, item = ring.world, np.dtype(dtype).itemsize
        total = sum(counts)
        offs = [int(o) for o in np.cumsum([0] + counts)]
        mine = [counts[r] if collective == "all_gather" else total for r in range(n)]
        xs = [operand(dtype, mine[r], seed * 31 + r) for r in range(n)]
        osize = [counts[r] if collective == "reduce_scatter" else total for r in range(n)]
        obuf = [HostBuffer((osize[r] + offset + 1) * item) for r in range(n)]
        optr = [b.ptr + offset * item for b in obuf]
        for b in obuf:
            b.view[:] = 0xA5
        if in_place:
            xptr = [optr[r] + (offs[r] * item if collective == "all_gather" else 0) for r in range(n)]
            xbuf = obuf
        else:
            xbuf = [HostBuffer((mine[r] + offset + 1) * item) for r in range(n)]
            xptr = [b.ptr + offset * item for b in xbuf]
        for r in range(n):
            at(xptr[r], mine[r], dtype)[:] = xs[r]
        right = [optr[(r + 1) % n] for r in range(n)] if direct else None
        ring.run(collective, xptr, optr, counts, dtype, op, kernel=kernel, channels=channels, right_outs=right)
        want = reference.expected(collective, xs, counts, op)
        for r in range(n):
            why = reference.same(at(optr[r], osize[r], dtype).copy(), want[r])
            if why:
                return f"rank {r}: {why}"
            if obuf[r].view[(offset + osize[r]) * item] != 0xA5:
                return f"rank {r}: wrote past the end of its output"
        return None

    def case(self, label: str, ring: Ring, *args, **kw) -> None:
        self.cases += 1
        try:
            why = self.call(ring, *args, **kw)
        except Exception as e:  # one case's crash is that case's failure
            why = f"{type(e).__name__}: {e}"
        if why is None:
            self.ok += 1
        else:
            self.failures.append(f"{label}: {why}")
            if self.verbose:
                print(f"  FAIL {label}: {why}")


def matrix(h: Harness, worlds=(2, 3, 4, 5), small: bool = True, few: bool = False) -> None:
    """The case matrix; ``few`` keeps a subset (TSan, broken builds)."""
    dts = list(KERNEL_DTYPES) if not few else ["float32", "bfloat16"]
    for n in worlds:
        rng = np.random.default_rng(n)
        for gi, (nch, slots, slot, block) in enumerate(GEOMETRIES):
            h.backend.block = block
            h.backend.cooperative = (n + gi) % 2 == 0  # else one launch per rank, each on its own stream
            geo = layout.Geometry(channels=nch, slots=slots, slot_bytes=slot, stage_bytes=1 << 14)
            ring = Ring.virtual(h.backend, n, geo, timeout_s=20.0)
            k = 0
            for di, d in enumerate(dts):
                dt = DTYPES[d].numpy
                for oi, op in enumerate(OPS):
                    for coll in ("reduce_scatter", "all_reduce", "all_gather"):
                        if coll == "all_gather" and oi:
                            continue
                        k += 1
                        if (k + gi) % len(GEOMETRIES):  # each geometry takes a third, all in all everything
                            continue
                        shape = ("even", "uneven", "empty", "none")[k % 4 if k % 9 else 3]
                        counts = counts_for(shape, 37 + 11 * di + 5 * oi, n, dt.itemsize, rng)
                        direct = coll != "reduce_scatter" and k % 3 == 0
                        in_place = coll != "reduce_scatter" and k % 5 == 1
                        label = (f"ring {coll} {d} {op} n={n} ch={nch} slots={slots}x{slot}B block={block} "
                                 f"{ring.residency.mode} "
                                 f"{shape} {counts}{' direct' if direct else ''}{' in place' if in_place else ''}")
                        h.case(label, ring, coll, dt, op, counts, channels=1 + k % nch, direct=direct,
                               in_place=in_place, offset=(k % 4) if k % 7 else 0, seed=k)
            if small and gi == 0:
                small_cases(h, ring, n, rng, dts)


def small_cases(h: Harness, ring: Ring, n: int, rng, dts) -> None:
    """One-shot and two-shot kernels for every dtype and op, on the ring's own workspaces."""
    h.backend.block = 4
    k = 0
    for d in dts:
        dt = DTYPES[d].numpy
        for op in OPS:
            for kind, coll in (("oneshot", "all_reduce"), ("twoshot", "all_reduce"), ("oneshot", "reduce_scatter"),
                               ("oneshot", "all_gather")):
                if coll == "all_gather" and op != "sum":
                    continue
                k += 1
                counts = counts_for(("even", "uneven", "empty")[k % 3], 23 + k % 17, n, dt.itemsize, rng)
                blocks = 1 + k % 3
                label = f"{kind} {coll} {d} {op} n={n} blocks={blocks} {counts}"
                h.case(label, ring, coll, dt, op, counts, kernel=kind, channels=blocks, in_place=k % 4 == 0 and
                       coll == "all_reduce", offset=k % 3, seed=1000 + k)


def missing(backend: HostBackend, n: int = 4, gone: int = 2, timeout_s: float = 0.3) -> list[CollectiveTimeout]:
    """Run an all-reduce with rank ``gone`` never launched; every other rank's exception."""
    geo = layout.Geometry(channels=2, slots=2, slot_bytes=32, stage_bytes=1 << 12)
    full = Ring.virtual(backend, n, geo, timeout_s=timeout_s)
    here = [r for r in range(n) if r != gone]
    part = Ring(backend, n, here, {r: full.own[r] for r in here}, full.ws_ptrs, geo, timeout_s, full.residency)
    count = 400
    bufs = {r: (HostBuffer(count * 4), HostBuffer(count * 4)) for r in here}
    try:
        part.run("all_reduce", [bufs[r][0].ptr for r in here], [bufs[r][1].ptr for r in here],
                 split_counts(count, n, 16), np.float32, "sum", kernel="ring")
    except CollectiveTimeout as e:
        return list(e.records)
    return []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--tsan", action="store_true", help="a subset under ThreadSanitizer; prints its report count")
    ap.add_argument("--broken", choices=sorted(BROKEN), help="run a subset on a deliberately broken protocol")
    ap.add_argument("--missing", action="store_true", help="leave one rank out; print every rank's timeout")
    args = ap.parse_args(argv)
    few = args.tsan or bool(args.broken)  # a variant build: bf16 and f32 only, the ring alone when broken
    defines = ("-DRZ_FEW_DTYPES", BROKEN[args.broken]) if args.broken else ("-DRZ_FEW_DTYPES",) if few else ()
    files = ("ring.cu",) if args.broken else FILES
    if args.tsan and "libtsan" not in os.environ.get("LD_PRELOAD", ""):
        build(defines, tsan=True, files=files)  # here: g++ must not run under TSan
        env = {**os.environ, "LD_PRELOAD": tsan_preload(), "TSAN_OPTIONS": "halt_on_error=0 report_signal_unsafe=0"}
        r = subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env=env,
                           capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        races = len(re.findall(r"WARNING: ThreadSanitizer", r.stderr))
        print(f"tsan: {races} ThreadSanitizer reports (exit status {r.returncode})")
        if races and args.verbose:
            sys.stdout.write(r.stderr[:6000])
        return r.returncode if r.returncode else (1 if races and not args.broken else 0)
    t0 = time.perf_counter()
    backend = HostBackend(defines=defines, tsan=args.tsan, files=files)
    built = time.perf_counter() - t0
    if args.missing:
        for e in missing(backend):
            print(f"  rank {e.rank} ({e.cause}, peer {e.peer}, origin {e.origin}): {e}")
        return 0
    h = Harness(backend, args.verbose)
    matrix(h, worlds=(3, 4) if few else (2, 3, 4, 5), small=not args.broken, few=few)
    print(f"  built in {built:.1f} s, {h.cases} cases in {time.perf_counter() - t0 - built:.1f} s")
    for f in h.failures[:20]:
        print(f"  FAIL {f}")
    print(f"ring on host: {h.ok} of {h.cases} cases equal the reference")
    return 0 if h.ok == h.cases and h.cases else 1


if __name__ == "__main__":
    sys.exit(main())
