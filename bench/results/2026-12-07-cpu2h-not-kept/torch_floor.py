"""What torch's own API costs per call, before any backend moves a byte (one process, world of 2).

A Python group whose methods do nothing (bench/torch_groups.py's noop_group, torch's dispatch into
a Python ProcessGroup, as the ringzero group is called) against torch's own C++ FakeProcessGroup
(a C++ backend that does nothing), same tensors and fresh views ``t[:]``. Best of five runs of
20000 calls each; microseconds per call. Run from the checkout's root:
  .venv/bin/python bench/results/2026-12-07-cpu2h-not-kept/torch_floor.py
"""
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from torch_groups import noop_group  # noqa: E402  (bench/torch_groups.py)

warnings.simplefilter("ignore", FutureWarning)
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
groups = {"C++ FakeProcessGroup": dist.group.WORLD, "Python no-op group": noop_group(0, 2)}
inp, out, big = torch.zeros(512), torch.zeros(256), torch.zeros(512)  # 1 KiB float32 in / piece


def per_call(f, n=20000):
    for _ in range(2000):
        f()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


print(f"torch {torch.__version__}; us per call, 1 KiB float32")
print("| group | call | same tensors | fresh views |")
print("|---|---|---|---|")
for name, g in groups.items():
    calls = {
        "reduce_scatter_single": (lambda: dist.reduce_scatter_single(out, inp, group=g),
                                  lambda: dist.reduce_scatter_single(out[:], inp[:], group=g)),
        "all_gather_single": (lambda: dist.all_gather_single(big, out, group=g),
                              lambda: dist.all_gather_single(big[:], out[:], group=g)),
        "all_reduce": (lambda: dist.all_reduce(inp, group=g), lambda: dist.all_reduce(inp[:], group=g)),
    }
    for call, (same, fresh) in calls.items():
        print(f"| {name} | {call} | {per_call(same):.2f} | {per_call(fresh):.2f} |")
print(f"| - | two torch views `t[:]` alone | - | {per_call(lambda: (inp[:], out[:])):.2f} |")
x = inp.numpy()
print(f"| - | two numpy views `x[:]` alone | - | {per_call(lambda: (x[:], x[:])):.2f} |")
