"""The GPU kernel ring: one launch runs a whole reduce-scatter, all-gather or all-reduce.

    from collectives.gpu_ring import Ring, can_serve
    ring = Ring.virtual(CupyBackend(cupy), world=4)        # virtual ranks on one GPU
    ring.run("all_reduce", xs, outs, counts, "float32", "sum")

csrc/ring/ holds the kernels (ring.cu: the chunked, pipelined ring; ring_small.cu:
one-shot and two-shot kernels and the two-process probe); this package sets them up
and launches them: layout.py (the workspace, byte for byte), plan.py (the schedule),
road.py (whether this road serves a call, and with which kernel), tuning.py (the
crossovers, unmeasured), residency.py (co-residency), record.py (the error record),
workspace.py, backend.py (cupy), ring.py (the calls), explain.py (teaching).
It imports only collectives.errors and collectives.dtypes of the rest of the package;
cupy only when a CupyBackend is made. collectives/gpu_ring/host.py is the same Backend on CPU
threads (the kernels' source compiled by g++), which every test here runs on.
"""
from .layout import Geometry
from .ring import Ring, default_geometry
from .road import ROAD, Verdict, can_serve, kernel_kind

__all__ = ["Geometry", "ROAD", "Ring", "Verdict", "can_serve", "default_geometry", "kernel_kind"]
