"""The workspace and the launch arguments, byte for byte as csrc/ring/rz_ring.cuh has them.

A rank's workspace is one device allocation::

    RzWs      counters: abort and claim words, per channel ready/freed/credit and the
              rank's carried state, per block the small kernels' arrivals (24960 bytes)
    slots     at slots_off: [channel][slot], slot_stride bytes each (payload + 16 for the
              phase + padding), the receive FIFOs the left neighbour writes
    stage     at stage_off: two input areas and two result areas of stage_bytes

The structs here are ctypes mirrors of the C ones; tests/test_ring_host.py compares
every size and offset with the host build's offsetof(). A kernel takes one ``Args``
(shared ``Launch`` part plus up to MAX_RANKS ``Rank`` parts) by value.
"""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass

MAX_RANKS = 8
MAX_CHANNELS = 32
DIRECT = 1  # Rank.flags
U64 = C.c_uint64
I64 = C.c_int64
I32 = C.c_int32
# RzErr.kind / RzErr.cause
WAIT_DATA, WAIT_SLOT, WAIT_CREDIT, WAIT_ARRIVE, WAIT_ENTRY = 1, 2, 3, 4, 5
TIMEOUT, ABORTED, HOST_ABORT = 1, 2, 3


class Head(C.Structure):
    _fields_ = [("abort", U64), ("pad0", U64 * 15), ("claim", U64), ("pad1", U64 * 15),
                ("probe", U64), ("probe_local", U64), ("pad2", U64 * 14)]


class Chan(C.Structure):
    _fields_ = [("ready", U64), ("pad0", U64 * 15), ("freed", U64), ("pad1", U64 * 15), ("credit", U64),
                ("pad2", U64 * 15), ("sent", U64), ("recvd", U64), ("calls", U64), ("waiting", U64),
                ("pad3", U64 * 12)]


class Small(C.Structure):
    _fields_ = [("arrive", U64 * MAX_RANKS), ("pad0", U64 * 8), ("bars", U64), ("calls", U64), ("waiting", U64),
                ("pad1", U64 * 13)]


class Ws(C.Structure):
    _fields_ = [("head", Head), ("chan", Chan * MAX_CHANNELS), ("small", Small * MAX_CHANNELS)]


class Err(C.Structure):
    _fields_ = [("valid", U64), ("rank", I32), ("channel", I32), ("step", I32), ("coll", I32), ("round", I64),
                ("kind", I32), ("cause", I32), ("peer", I32), ("blamed", I32),
                ("wanted", U64), ("seen", U64), ("abort", U64), ("waited_ns", U64)]


class Rank(C.Structure):
    _fields_ = [("ws", U64), ("left", U64), ("right", U64), ("x", U64), ("out", U64), ("right_out", U64),
                ("err", U64), ("host_abort", U64), ("peer", U64 * MAX_RANKS), ("rank", I32), ("flags", I32)]


class Launch(C.Structure):
    _fields_ = [("offs", I64 * (MAX_RANKS + 1)), ("slot_bytes", I64), ("slot_stride", I64), ("slots_off", I64),
                ("stage_bytes", I64), ("stage_off", I64), ("timeout_ns", U64),
                ("nranks", I32), ("nslots", I32), ("nchannels", I32), ("nlocal", I32)]


class Args(C.Structure):
    _fields_ = [("L", Launch), ("r", Rank * MAX_RANKS)]


class Probe(C.Structure):
    _fields_ = [("ws", U64), ("peer", U64), ("result", U64), ("deadline_ns", U64), ("rounds", I32), ("pad", I32)]


STRUCTS = {"RzHead": Head, "RzChan": Chan, "RzSmall": Small, "RzWs": Ws, "RzErr": Err, "RzRank": Rank,
           "RzLaunch": Launch, "RzArgs": Args, "RzProbe": Probe}
PROBE_RESULT_BYTES = 24  # u64 [done flag (1 ok, 2 late), rounds done, nanoseconds]


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class Geometry:
    """How big one rank's workspace is and where its parts start.

    Args:
      channels: ring channels the slots serve (a launch may use fewer).
      slots: receive slots per channel (>= 2: a step needs one, half the FIFO at most).
      slot_bytes: payload per slot, a multiple of 16.
      stage_bytes: one staging area of the small kernels (the largest call they take).
    """
    channels: int
    slots: int
    slot_bytes: int
    stage_bytes: int

    def __post_init__(self):
        if not 1 <= self.channels <= MAX_CHANNELS:
            raise ValueError(f"channels must be 1..{MAX_CHANNELS}, got {self.channels}")
        if self.slots < 2:
            raise ValueError(f"a channel needs at least 2 slots (a step takes one, at most half), got {self.slots}")
        if self.slot_bytes < 16 or self.slot_bytes % 16:
            raise ValueError(f"slot_bytes must be a positive multiple of 16, got {self.slot_bytes}")
        if self.stage_bytes < 0 or self.stage_bytes % 16:
            raise ValueError(f"stage_bytes must be a multiple of 16, got {self.stage_bytes}")

    @property
    def counters_bytes(self) -> int:
        return C.sizeof(Ws)

    @property
    def slot_stride(self) -> int:
        return _align(self.slot_bytes + 16, 128)  # +16: a slice sits at its own 16-byte phase

    @property
    def slots_off(self) -> int:
        return _align(self.counters_bytes, 256)

    @property
    def stage_off(self) -> int:
        return _align(self.slots_off + self.channels * self.slots * self.slot_stride, 256)

    @property
    def nbytes(self) -> int:
        return self.stage_off + 4 * self.stage_bytes

    @property
    def slot_area_bytes(self) -> int:
        return self.channels * self.slots * self.slot_stride
