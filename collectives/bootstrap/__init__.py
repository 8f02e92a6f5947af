"""Setup between ranks, apart from the data path: who is in the group, who
shares a node, what every rank mapped, and whether every rank's setup step
worked.

A bootstrap has ``rank``, ``size`` and a ``timeout`` (seconds every setup step
may wait for the slowest rank), and five calls of its own: ``allgather(bytes)``,
``broadcast(bytes, root)``, ``barrier()``, ``split(color, key)`` and
``transport()`` (the data path between its ranks). Everything else here is
built on those, so every way of starting processes gets it alike:

- ``node()``: the ranks that share this node's memory (``node_size`` from the
  tuning table, else the ranks on the same host);
- ``agree(ok, what, detail)``: a setup step that can fail on one rank (a
  segment that does not fit, a probe, a mapping) tells every rank its outcome;
  every rank raises the same ``SetupError``, naming the ranks that failed and
  why, or none does.

- ``busy()``: (oversubscribed, core_bound) of this rank, from the cores the
  node's ranks may run on (waiting.busy_policy), for the transport's waits.

``mpi.py`` implements it over an MPI communicator, for processes an MPI
launcher started; ``store.py`` over torch's store, for a store world
(torchrun, mp.spawn, plain srun), never initialising MPI. ``choose.py`` says
which of the two a torch backend's process forms, from the environment.
"""
from __future__ import annotations

import os
import pickle
import socket
from abc import ABC, abstractmethod

from ..errors import SetupError

SETUP_TIMEOUT_S = 60.0


class Bootstrap(ABC):
    """The setup interface (see the module docstring). Subclasses give rank, size,
    timeout and the five calls."""

    rank: int
    size: int
    timeout: float = SETUP_TIMEOUT_S
    mpi_comm = None  # the MPI communicator behind it, for the MPI baselines; None elsewhere

    @abstractmethod
    def allgather(self, data: bytes) -> list[bytes]:
        ...

    @abstractmethod
    def broadcast(self, data: bytes | None, root: int = 0) -> bytes:
        ...

    @abstractmethod
    def barrier(self) -> None:
        ...

    @abstractmethod
    def split(self, color: int, key: int) -> "Bootstrap":
        ...

    @abstractmethod
    def transport(self, tuning=None):
        """The data path between these ranks (isend, irecv, test, cancel), its waits per ``tuning``."""

    def close(self) -> None:
        pass

    # ------------------------------------------------------------ built on the five
    def allgather_obj(self, obj) -> list:
        """Every rank's ``obj`` (picklable), in rank order."""
        return [pickle.loads(b) for b in self.allgather(pickle.dumps(obj))]

    def broadcast_obj(self, obj, root: int = 0):
        """Rank ``root``'s ``obj`` on every rank."""
        return pickle.loads(self.broadcast(pickle.dumps(obj) if self.rank == root else None, root))

    def agree(self, ok: bool, what: str, detail: str = "", hint: str = "", error=SetupError) -> None:
        """Tell every rank whether this rank's setup step ``what`` worked; raise the same
        SetupError on every rank when any failed.

        Args:
          ok: this rank's outcome.
          what: the step, in the caller's terms ("heap window 3 of 48 MiB").
          detail: why it failed here (used when not ``ok``).
          hint: the way out, added to the message once.
          error: the SetupError subclass to raise.
        """
        try:
            outcomes = self.allgather_obj((bool(ok), "" if ok else str(detail)))
        except SetupError as e:  # a rank never came: say which step it missed, in the caller's terms
            raise SetupError(f"{e}; the step: {what}") from None
        failed = [(q, d) for q, (good, d) in enumerate(outcomes) if not good]
        if failed:
            why = "; ".join(f"rank {q}: {d}" for q, d in failed)
            raise error(f"rank {self.rank}: {what} failed on rank(s) {[q for q, _ in failed]} "
                             f"of {self.size}: {why}" + (f". {hint}" if hint else ""))

    def busy(self) -> tuple[bool, bool]:
        """(oversubscribed, core_bound) of this rank (waiting.busy_policy), from the cores
        every rank on this node may run on (mpirun binds each rank to one; a collective call
        the first time)."""
        got = getattr(self, "_busy", None)
        if got is None:
            from ..waiting import busy_policy
            own = os.sched_getaffinity(0)
            node = self.node()
            cores = set().union(*node.allgather_obj(sorted(own)))
            got = self._busy = busy_policy(node.size, len(cores), len(own))
            node.close()
        return got

    def node(self, node_size: int = 0) -> "Bootstrap":
        """The ranks that share this node's memory, as a bootstrap of their own (a collective
        call). ``node_size`` k > 0 makes every k consecutive ranks one node (tests run the
        several-node roads on one machine that way)."""
        if node_size < 0:
            raise ValueError(f"node_size must be >= 0, got {node_size}")
        if node_size:
            return self.split(self.rank // node_size, self.rank)
        keys = self.allgather_obj(host_identity())
        return self.split(keys.index(keys[self.rank]), self.rank)


def host_identity() -> str:
    """What ranks on one node share and ranks on others do not: the host name and boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}/{os.uname().nodename}"


__all__ = ["Bootstrap", "SETUP_TIMEOUT_S", "SetupError", "host_identity"]
