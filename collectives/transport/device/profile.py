"""Where a device message spends its time: an optional recorder the protocols fill.

``DeviceTransport.profile = Profile()`` turns it on (off by default: then the
protocols only test ``t.profile is not None``). Each operation notes the time
between the moments its ``step`` sees it move on, under a name per phase:

  send.ready_wait   posted -> the event after its producer is seen done (host poll)
  send.ack_wait     control message / data posted -> the receiver's ack (ipc) or
                    MPI completion (staged, cuda_aware)
  send.d2h_wait     staged: posted -> its device-to-host copy is seen done
  recv.ctrl_wait    posted -> the peer's control message (ipc) or data (staged,
                    cuda_aware) has arrived
  recv.pull_issue   ipc: the time inside backend.pull (IPC mapping, memcpyAsync)
  recv.copy_wait    ipc: copy queued -> seen done (host poll); staged: upload
  recv.ack_send     ipc: ack posted -> MPI completion
  recv.free_wait    cuda_aware: posted -> the buffer's earlier users are done

Times are as seen by polls: a phase ends when a wait next looks, so they add up
to the host's view of one message. tests/mpi/gpu_collectives.py --bench prints
them per collective on the GPU.
"""
from __future__ import annotations

import time
from collections import defaultdict


class Profile:
    """Seconds and counts per phase name, summed over every message."""

    def __init__(self):
        self.seconds: dict = defaultdict(float)
        self.counts: dict = defaultdict(int)

    def add(self, what: str, seconds: float) -> None:
        self.seconds[what] += seconds
        self.counts[what] += 1

    def timed(self, what: str, fn, *args):
        """fn(*args), its duration added under ``what``."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.add(what, time.perf_counter() - t0)

    def summary(self) -> dict:
        """{phase: {"n": count, "total_us": ..., "mean_us": ...}}, phases sorted by name."""
        return {k: {"n": self.counts[k], "total_us": self.seconds[k] * 1e6,
                    "mean_us": self.seconds[k] * 1e6 / max(1, self.counts[k])} for k in sorted(self.seconds)}

    def line(self) -> str:
        """One line: 'phase n x mean us' per phase."""
        return ", ".join(f"{k} {v['n']} x {v['mean_us']:.0f} us" for k, v in self.summary().items())
