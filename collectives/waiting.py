"""How a rank waits, the one policy for every wait in Python (csrc/fastpath.c's
``wait_flag`` is the same policy in C): spin, then yield the core, then sleep,
backing off, so a message microseconds away costs nothing and a late peer costs
no core.

The caller's thread spins unless the node has more ranks than cores. The
progress thread runs an async collective while the caller computes: where the
rank has fewer cores than those two threads (``core_bound``) it never spins or
yields, it sleeps between polls, so the caller keeps the core.
"""
from __future__ import annotations

import os
import time

from .work import on_progress_thread

MIN_SLEEP_S = 20e-6


def busy_policy(local_ranks: int, node_cores: int, own_cores: int) -> tuple[bool, bool]:
    """(oversubscribed, core_bound) for a rank.

    oversubscribed: more ranks on this node than cores, so even the caller's
    own waits must yield. core_bound: a rank has fewer cores than its two busy
    threads (the caller computing, the progress thread running an async
    collective), counting threads, not ranks: then the progress thread must
    not poll at all while it waits, or it takes the core from the caller it
    should overlap with. mpirun binds each rank to one core by default.
    """
    return local_ranks > node_cores, own_cores < 2 or 2 * local_ranks > node_cores


class WaitPolicy:
    """One communicator's waiting: the tuning table's times, and this rank's cores.

    Args:
      tuning: the communicator's Tuning (spin_s, thread_spin_s, yield_s, max_sleep_s).
      oversubscribed: more ranks on this node than cores.
      core_bound: fewer cores for this rank than its two busy threads.
    """

    __slots__ = ("spin", "thread_spin", "yld", "max_sleep", "oversubscribed", "core_bound")

    def __init__(self, tuning, oversubscribed: bool, core_bound: bool):
        self.spin, self.thread_spin = tuning.spin_s, tuning.thread_spin_s
        self.yld, self.max_sleep = tuning.yield_s, tuning.max_sleep_s
        self.oversubscribed, self.core_bound = oversubscribed, core_bound

    def times(self) -> tuple[float, float]:
        """(spin, yield) seconds for a wait on this thread, before it sleeps."""
        if on_progress_thread():
            return (0.0, 0.0) if self.core_bound else (self.thread_spin, self.yld)
        return (0.0 if self.oversubscribed else self.spin), self.yld

    def pacer(self, now: float) -> "Pacer":
        spin, yld = self.times()
        return Pacer(now + spin, now + spin + yld, self.max_sleep)


class Pacer:
    """One wait's phases: ``spinning(now)`` while it may busy-poll, then ``pause(now)``
    between polls (a yield, then sleeps doubling up to the policy's longest)."""

    __slots__ = ("spin_until", "yield_until", "sleep", "max_sleep")

    def __init__(self, spin_until: float, yield_until: float, max_sleep: float):
        self.spin_until, self.yield_until = spin_until, yield_until
        self.sleep, self.max_sleep = MIN_SLEEP_S, max_sleep

    def spinning(self, now: float) -> bool:
        return now < self.spin_until

    def pause(self, now: float) -> None:
        if now < self.yield_until:
            os.sched_yield()
        else:
            time.sleep(self.sleep)
            self.sleep = min(self.sleep * 2, self.max_sleep)
