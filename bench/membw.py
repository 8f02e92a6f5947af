"""This machine's memory bandwidth, the ceiling for collectives on CPU ranks.

    python bench/membw.py            # prints GB/s (read + write) of a large copy

A ring step on CPU ranks copies every byte at least once through memory (into
the message, out of it, through the reduce), so no busbw on one machine can
beat a plain large copy. We time ``np.copyto`` of a buffer much larger than
the caches and count the bytes read plus the bytes written, as STREAM's
"Copy" does: 2 x size / time. The best of a few repeats is reported (the
others are disturbed by whatever else runs on the machine).
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=128, help="buffer size in MiB (default 128)")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    gbps = measure_membw(a.mib << 20, a.repeats)
    print(f"memory bandwidth (copy of {a.mib} MiB, read + write): {gbps:.2f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
