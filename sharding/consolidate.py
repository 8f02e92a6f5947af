"""Write a checkpoint's full float32 weights to one .npz (keys "unit/name").

    python -m sharding.consolidate DIR OUT.npz
"""
from __future__ import annotations

import argparse

import numpy as np

from .checkpoint import consolidate


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="checkpoint directory (or its parent holding LATEST)")
    ap.add_argument("out", help="output .npz")
    a = ap.parse_args(argv)
    weights = consolidate(a.directory)
    np.savez(a.out, **weights)
    print(f"wrote {len(weights)} arrays, {sum(w.size for w in weights.values())} parameters to {a.out}")


if __name__ == "__main__":
    main()
