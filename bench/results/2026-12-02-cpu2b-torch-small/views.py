"""What making a fresh view costs, per call, in one process: torch's and numpy's ways
(best of 5 repeats of 200000 calls). python views.py > views.txt"""
import timeit

import numpy as np
import torch

t, a = torch.zeros(256), np.zeros(256, np.float32)
for name, f in [("torch t[:]", lambda: t[:]), ("torch t.view(-1)", lambda: t.view(-1)),
                ("torch t.detach()", lambda: t.detach()), ("torch.empty(256)", lambda: torch.empty(256)),
                ("numpy a[:]", lambda: a[:]), ("numpy np.empty(256)", lambda: np.empty(256, np.float32))]:
    n = 200000
    print(f"{name:20s} {min(timeit.repeat(f, number=n, repeat=5)) / n * 1e9:7.0f} ns")
