"""Write a checkpoint's full float32 weights to one .npz (keys "unit/name").

    python -m sharding.consolidate DIR OUT.npz
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from .ckpt_files import CheckpointError, consolidate


def main(argv=None) -> None:
    """Exit status 0 on success; 1 with one line on stderr if the checkpoint cannot be read or written."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="checkpoint directory (or its parent holding LATEST)")
    ap.add_argument("out", help="output .npz")
    a = ap.parse_args(argv)
    try:
        weights = consolidate(a.directory)
        np.savez(a.out, **weights)
    except (CheckpointError, OSError, ValueError, KeyError) as e:  # one line: what failed, and where
        what = f"{type(e).__name__}: {e}" if not isinstance(e, CheckpointError) else str(e)
        sys.exit(f"consolidate: {a.directory}: {what}")
    print(f"wrote {len(weights)} arrays, {sum(w.size for w in weights.values())} parameters to {a.out}")


if __name__ == "__main__":
    main()
