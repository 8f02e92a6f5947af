"""Build the torch group's C++ calls for the installed torch (native.py):
``python -m collectives.torch_backend.build [-v]``; ``make venv`` runs it."""
import sys

import torch

from .native import build

if __name__ == "__main__":
    path = build(verbose="-v" in sys.argv)
    print(f"built {path} for torch {torch.__version__}")
