"""This machine's memory bandwidth, the ceiling for collectives on CPU ranks.

    python bench/membw.py            # prints GB/s (read + write) of a large copy
    python bench/membw.py --ways     # numpy's copy, streaming stores and process_vm_readv by size

A ring step on CPU ranks copies every byte at least once through memory (into
the message, out of it, through the reduce), so no busbw on one machine can
beat a plain large copy. We time ``np.copyto`` of a buffer much larger than
the caches and count the bytes read plus the bytes written, as STREAM's
"Copy" does: 2 x size / time. The best of a few repeats is reported (the
others are disturbed by whatever else runs on the machine).

``--ways`` times, at 1 to 32 MiB, the three copies the direct roads make into a
caller's out: numpy's (memcpy), the C extension's streaming stores (the tuning's
``stream_min_bytes`` picks them from a size) and ``process_vm_readv`` (a peer's
private input read in place, here from this process itself), in GB/s of the size
copied, one process alone.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def measure_membw(nbytes: int = 128 << 20, repeats: int = 5) -> float:
    """GB/s (1e9 bytes per second, read + write) of the best of ``repeats`` copies of ``nbytes``.

    Args:
      nbytes: buffer size; keep it well above the last-level cache.
      repeats: timed copies after one untimed one (which faults the pages in).
    """
    if nbytes < 8 or repeats < 1:
        raise ValueError(f"bad nbytes={nbytes} or repeats={repeats}")
    src = np.ones(nbytes // 8, np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9


def copy_ways(sizes_mib=(1, 4, 32), repeats: int = 10) -> dict:
    """{(way, MiB): GB/s of the bytes copied}, best of ``repeats``, for the ways ``--ways`` names."""
    import os
    import sys

    # the package, not bench/collectives.py
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from collectives.fast.codes import C
    from collectives.symmetric.cma import Remote, read  # the direct roads' own process_vm_readv

    out = {}
    for mib in sizes_mib:
        src = np.ones((mib << 20) // 8, np.float64)
        dst = np.zeros_like(src)
        a, b, n = dst.ctypes.data, src.ctypes.data, src.nbytes
        peer = Remote(os.getpid(), b, n, 0)  # this process read as a peer
        ways = {"numpy": lambda: np.copyto(dst, src), "readv": lambda: read(dst, peer)}
        if C is not None:
            ways["stream"] = lambda: C.stream(a, b, n)
        for name, f in ways.items():
            f()
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                f()
                best = min(best, time.perf_counter() - t0)
            out[(name, mib)] = n / best / 1e9
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=128, help="buffer size in MiB (default 128)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ways", action="store_true", help="numpy's copy, streaming stores, process_vm_readv")
    a = ap.parse_args(argv)
    if a.ways:
        for (way, mib), gbps in copy_ways().items():
            print(f"{way:>7} {mib:3d} MiB: {gbps:6.2f} GB/s")
        return 0
    gbps = measure_membw(a.mib << 20, a.repeats)
    print(f"memory bandwidth (copy of {a.mib} MiB, read + write): {gbps:.2f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
