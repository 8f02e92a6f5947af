"""Crossovers and sizes of the GPU kernel road, in one place.

UNMEASURED DEFAULTS. None of these numbers has been measured: no GPU has run these
kernels yet. They are guesses from the shape of the algorithms (one-shot reads n
inputs per rank, two-shot 2, the ring pipelines) and from NCCL's published choices,
to be replaced by what bench/gpu_ring.py measures on a lent H200 (its latency sweep
gives the one-shot/two-shot/ring crossovers, its bandwidth sweep the channel count).
The road table should quote where each number was measured once it has been.
"""
from __future__ import annotations

# all-reduce: one-shot up to this many bytes per rank, two-shot up to the next, then the ring
ONESHOT_MAX_BYTES = 64 << 10
TWOSHOT_MAX_BYTES = 512 << 10
# reduce-scatter and all-gather: the one-shot kernels up to this many bytes of the full buffer
SMALL_MAX_BYTES = 64 << 10

# the ring's geometry: per channel SLOTS receive slots of SLOT_BYTES (one step takes one)
SLOTS = 8
SLOT_BYTES = 128 << 10
MAX_CHANNELS = 16                 # channels a workspace is built for
CHANNEL_MIN_BYTES = 1 << 20       # a channel per this many bytes of a rank's buffer, at least one
SMALL_BLOCK_BYTES = 32 << 10      # one-/two-shot: a block per this many bytes, up to MAX_CHANNELS
STAGE_BYTES = TWOSHOT_MAX_BYTES   # each of the four staging areas of the small kernels

TIMEOUT_S = 30.0                  # every spin's deadline on the device
PROBE_DEADLINE_S = 0.1            # the two-process handshake: all its rounds within this
PROBE_ROUNDS = 64                 # round trips: time-sliced processes cannot do 64 in 100 ms
