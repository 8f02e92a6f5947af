"""Signals in shared memory: one control slot per rank, sequence numbers, deadlines.

Each node rank owns one slot in a control window and is its only writer:

  word 0            the flag: 8 * epoch + phase, only ever growing
  words 1..3        the pipe's step counters (pipe.py), only ever growing
  words 8..8+W      header area for even epochs: the agreement header (see
                    agree.FIELDS), then where this rank's source and
                    destination live (window, byte offset; -1 when private)
  words 8+W..8+2W   the same for odd epochs

A collective posts its header and raises its flag to ``8 * epoch + READY``
(``INPUT`` at once when its input is already in the heap; a staged input is
copied in after the header check, then announced with ``INPUT``);
peers wait for that, then compare every peer's header with their own as
bytes before reading any data, so a mismatch is seen by every rank, from the
same headers, before a byte of data is read, and every rank raises
MismatchError naming who passed what. Headers alternate between two areas by
epoch: a rank that has finished a call and posts the next cannot overwrite a
header a slow peer is still comparing. Later phases (a segment reduced,
done reading) raise the flag further; every wait has the collective's
deadline and names the peer that never arrived (CollectiveTimeout), which is
also what a rank that died turns into.

Stores are ordered on x86 (TSO): data written before the flag is visible
before it. Waits follow the communicator's WaitPolicy (waiting.py).

A posted location is (window, byte offset) in the heap, or one of the codes
PRIVATE (an input staged into the stage window; an out outside the heap),
STAGE_WIN (an all-reduce's out: "my stage window") and CMA_WIN (a private
all-gather input offered in place, at the address in the offset: cma.py).
"""
from __future__ import annotations

import struct
import time

import numpy as np

from ..safety.agree import NF, describe
from ..errors import CollectiveError, CollectiveTimeout, MismatchError

READY, INPUT, REDUCED, DONE = 1, 2, 3, 4  # phases; a call's epoch spans 8 values
WAITS = {READY: "header posted", INPUT: "input staged", REDUCED: "segment reduced", DONE: "done reading"}
PRIVATE, STAGE_WIN, CMA_WIN = -1, -3, -4  # posted window codes for what is not in the heap
AREA = NF + 4  # header words, then src (win, off) and dst (win, off)
SLOT = 8 + 2 * AREA  # int64 words
SLOT_BYTES = (SLOT * 8 + 63) // 64 * 64
_HDR = struct.Struct(f"={AREA}q")
_LOCS = struct.Struct("=4q")  # after a header.Header's packed fields
_HEAD = NF * 8
_PRIVATE = (PRIVATE, PRIVATE)


class Signals:
    """The control slots of one node.

    Args:
      heap: the node's Heap (the control window is allocated from it).
      world_ranks: the world rank of every node rank (for messages).
      policy: how waits spin, yield and sleep (the communicator's WaitPolicy).
    """

    def __init__(self, heap, world_ranks, policy):
        self.rank, self.size = heap.rank, heap.size
        self.world = list(world_ranks)
        w = heap.window(SLOT_BYTES)
        self.slots = [p[:SLOT * 8].view(np.int64) for p in w.peers]
        self.mine = self.slots[self.rank]
        self.mine[:] = 0
        # every rank's flag word as a memoryview: reading or raising it costs a third of
        # numpy's scalar access, and the spin loops do little else
        self.flags = [memoryview(p[:8]).cast("q") for p in w.peers]
        self.flag = self.flags[self.rank]
        self.others = [q for q in range(self.size) if q != self.rank]
        self._other_flags = [self.flags[q] for q in self.others]
        # every rank's header fields, as int64 words (comparing byte-format views goes byte by byte)
        self.areas = [[memoryview(p[8 * (8 + a * AREA):8 * (8 + a * AREA + NF)]).cast("q") for p in w.peers]
                      for a in range(2)]
        self._mybuf = [memoryview(w.mine[8 * (8 + a * AREA):8 * (8 + (a + 1) * AREA)]) for a in range(2)]
        lo = [8 * (8 + a * AREA + NF) for a in range(2)]  # every rank's (src, dst) locations, as bytes
        self._locs = [[memoryview(p[lo[a]:lo[a] + 32]) for p in w.peers] for a in range(2)]
        self.policy = policy
        self.epoch = 0
        self.pipe_seq = 0  # pipe steps so far (pipe.py): the same on every rank
        heap.node.barrier()  # every slot zeroed before anyone polls it

    def post(self, hdr, src=_PRIVATE, dst=_PRIVATE, phase: int = READY) -> int:
        """Start a new call: write the header and locations, raise the flag. Returns the epoch base."""
        self.epoch = e = self.epoch + 1
        buf = self._mybuf[e & 1]
        head = getattr(hdr, "head", None)  # a header.Header: its fields packed already
        if head is not None:
            buf[:_HEAD] = head
            _LOCS.pack_into(buf, _HEAD, src[0], src[1], dst[0], dst[1])
        else:
            _HDR.pack_into(buf, 0, *hdr, src[0], src[1], dst[0], dst[1])
        base = 8 * e
        self.flag[0] = base + phase
        return base

    def raise_to(self, value: int) -> None:
        self.flag[0] = value

    def staging(self) -> bool:
        """Whether some rank's source is not in the heap this call and will be staged
        (-1; not an input read in place, cma.CMA_WIN)."""
        a = 8 + (self.epoch & 1) * AREA + NF
        return any(s[a] == -1 for s in self.slots)

    def loc(self, q: int, which: int):
        """Node rank q's (window, offset) for this epoch: which=0 source, 1 destination."""
        a = 8 + (self.epoch & 1) * AREA + NF + 2 * which
        s = self.slots[q]
        return int(s[a]), int(s[a + 1])

    def locs_key(self) -> bytes:
        """Every rank's posted locations this epoch as one bytes object (a cache key)."""
        return b"".join(self._locs[self.epoch & 1])

    def check(self, ctx) -> None:
        """Every peer has posted (waited for): compare headers as bytes; raise on mismatch."""
        mine = self.areas[self.epoch & 1]
        me = mine[self.rank]
        for q in self.others:
            if mine[q] != me:
                self._mismatch(ctx)

    def poison(self, hdr, mismatch: bool) -> None:
        """Failed outside the node (the hierarchy's ring between nodes): post a
        header no peer can agree with (version -1 for a mismatch, -2 for any
        other failure), so node peers waiting for our next step raise instead
        of timing out."""
        self.post([-1 if mismatch else -2] + list(hdr[1:]))

    def _mismatch(self, ctx):
        a = 8 + (self.epoch & 1) * AREA
        all_h = np.stack([np.array(s[a:a + NF]) for s in self.slots])
        bad = [self.world[q] for q in range(self.size) if all_h[q, 0] < 0]
        if bad:
            kind = MismatchError if all_h[[self.world.index(b) for b in bad], 0].max() == -1 else CollectiveError
            raise kind(f"rank {ctx.rank}: {ctx.label}: rank(s) {bad} of this node failed in the step between "
                       f"nodes ({'a mismatched call' if kind is MismatchError else 'an error'}; their own "
                       f"error names the cause), so this call cannot complete")
        where = "" if self.world == list(range(self.size)) else f" (node ranks are world ranks {self.world})"
        raise MismatchError(f"rank {ctx.rank}: ranks disagree on a collective call{where}. " + describe(all_h))

    def wait_all(self, ctx, value: int, step: str) -> None:
        for q, f in zip(self.others, self._other_flags):
            if f[0] < value:
                self.wait(ctx, q, value, step)

    def wait(self, ctx, q: int, value: int, step: str) -> None:
        """Spin until node rank q's flag reaches ``value``, or raise at the deadline."""
        s = self.flags[q]
        for _ in range(64):
            if s[0] >= value:
                return
        deadline, polls = ctx.deadline, 0
        now = time.monotonic()
        pace = self.policy.pacer(now)
        while s[0] < value:
            polls += 1
            if polls & 255:
                continue
            now = time.monotonic()
            if now > deadline:
                self._timeout(ctx, q, value, step)
            if not pace.spinning(now):
                pace.pause(now)

    def resumed(self, ctx, stop) -> int:
        """Where a C program stopped (fast/program.py), as the Python path goes on: raise
        its mismatch or timeout from the slots, or return the call's flag base (peers
        posted other locations: the header check has passed, the call goes on here).

        Args:
          stop: (base, what, q, phase): what is "mismatch", "timeout" (waiting for node
            rank q to reach ``phase``) or "changed".
        """
        base, what, q, phase = stop
        if what == "mismatch":
            self._mismatch(ctx)
        if what == "timeout":
            self._timeout(ctx, q, base + phase, WAITS[phase])
        return base

    def _timeout(self, ctx, q, value, step):
        peer = self.world[q]
        got = int(self.slots[q][0])
        there = "has not called it" if got < value - (value & 7) + READY else "stopped inside it"
        raise CollectiveTimeout(
            f"rank {ctx.rank}: {ctx.label} timed out after {ctx.timeout:g} s: rank {peer} never signalled "
            f"'{step}' through shared memory (direct path, call {value >> 3}; rank {peer} {there}: its flag "
            f"is at call {got >> 3} phase {got & 7}); did rank {peer} call this collective with buffers "
            f"from comm.alloc, or did it die?")
