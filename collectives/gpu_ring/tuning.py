"""Crossovers and sizes of the GPU kernel road, from the tuning table (collectives/tuning).

UNMEASURED DEFAULTS. None of these numbers has been measured: no GPU has run these
kernels yet. They are guesses from the shape of the algorithms (one-shot reads n
inputs per rank, two-shot 2, the ring pipelines) and from NCCL's published choices,
to be replaced by what bench/gpu_ring.py measures on a lent H200 (its latency sweep
gives the one-shot/two-shot/ring crossovers, its bandwidth sweep the channel count).
The road table should quote where each number was measured once it has been.
"""
from __future__ import annotations

from ..tuning import defaults

_t = defaults()  # the tuning table's rows (collectives/tuning): the one place they are written
ONESHOT_MAX_BYTES = _t.cuda_oneshot_max_bytes  # all-reduce: one-shot up to this, two-shot up to the next, the ring
TWOSHOT_MAX_BYTES = _t.cuda_twoshot_max_bytes
SMALL_MAX_BYTES = _t.cuda_small_max_bytes  # reduce-scatter and all-gather: one-shot up to this of the full buffer
SLOTS = _t.cuda_slots  # the ring's geometry: per channel SLOTS receive slots of SLOT_BYTES (a step takes one)
SLOT_BYTES = _t.cuda_slot_bytes
MAX_CHANNELS = _t.cuda_max_channels  # channels a workspace is built for
CHANNEL_MIN_BYTES = _t.cuda_channel_min_bytes  # a channel per this many bytes of a rank's buffer, at least one
SMALL_BLOCK_BYTES = _t.cuda_small_block_bytes  # one-/two-shot: a block per this many bytes, up to MAX_CHANNELS
STAGE_BYTES = TWOSHOT_MAX_BYTES  # each of the four staging areas of the small kernels

TIMEOUT_S = 30.0                  # every spin's deadline on the device
PROBE_DEADLINE_S = 0.1            # the two-process handshake: all its rounds within this
PROBE_ROUNDS = 64                 # round trips: time-sliced processes cannot do 64 in 100 ms
