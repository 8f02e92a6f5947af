"""The bootstrap over torch's store, for a store world: torchrun, mp.spawn, plain srun,
the DeepSpeed launcher. MPI is never initialised.

Every setup step is one exchange of keys under this bootstrap's prefix: each
rank sets ``<step>/<rank>`` and waits, up to the bootstrap's deadline, for every
rank's key, then reads those it needs. A rank that never comes turns into a
SetupError naming the step and the ranks whose keys are missing, instead of a
hang. Once a rank has finished step s, every rank has started it, so has
finished step s-1: then it deletes its own key of step s-1 (the store holds at
most two steps' keys per rank).

``split`` gives a bootstrap under a prefix of its own (the ranks that share a
color, ordered by key); ``transport`` a Gloo group on the same store under
another (transport/gloo.py).
"""
from __future__ import annotations

from datetime import timedelta

from ..errors import SetupError
from . import SETUP_TIMEOUT_S, Bootstrap


def _gloo_wait_s(timeout: float) -> float:
    """Gloo's own bound on a wait (transport/gloo.py): above every deadline of ours."""
    return max(3600.0, 2 * timeout + 60)


class StoreBootstrap(Bootstrap):
    """Setup over a torch store (``torch.distributed.Store``: TCPStore, FileStore, HashStore,
    a PrefixStore of one).

    Args:
      store: the store every rank of the group reaches.
      rank: this process's rank in the group.
      size: the group's ranks.
      timeout: seconds every setup step may wait for the slowest rank.
      prefix: the keys of this bootstrap (one per group: ranks of other groups use others).
    """

    def __init__(self, store, rank: int, size: int, timeout: float = SETUP_TIMEOUT_S, prefix: str = "ringzero"):
        import torch.distributed as dist

        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in a group of {size}")
        self.base, self.prefix = store, prefix
        self.store = dist.PrefixStore(prefix + "/", store)
        self.rank, self.size, self.timeout = int(rank), int(size), float(timeout)
        self._step = 0
        self._children = 0  # splits and transports made: each gets a prefix of its own

    def _exchange(self, what: str, data: bytes, read) -> list[bytes]:
        """Set this rank's key of the next step, wait for every rank's, return those in ``read``."""
        step, self._step = self._step, self._step + 1
        keys = [f"{step}/{q}" for q in range(self.size)]
        try:
            self.store.set(keys[self.rank], b"v" + data)  # never empty: some stores drop an empty value
            self.store.wait(keys, timedelta(seconds=self.timeout))
            got = self.store.multi_get([keys[q] for q in read]) if read else []
        except Exception as e:  # noqa: BLE001  a timeout or a store that went away: name the step
            raise SetupError(self._missed(what, keys, e)) from None
        if step:
            try:
                self.store.delete_key(f"{step - 1}/{self.rank}")
            except Exception:  # noqa: BLE001  a store without deletes keeps the key
                pass
        return [bytes(v)[1:] for v in got]

    def _missed(self, what: str, keys: list[str], error: Exception) -> str:
        try:
            missing = [q for q, k in enumerate(keys) if not self.store.check([k])]
        except Exception:  # noqa: BLE001
            missing = None
        who = (f"rank(s) {missing} of {self.size} never joined it (did one fail or exit?)" if missing else
               f"the store failed ({type(error).__name__}: {str(error).splitlines()[0][:200]})")
        return f"rank {self.rank}: setup step '{what}' timed out after {self.timeout:g} s: {who}"

    def allgather(self, data: bytes) -> list[bytes]:
        return self._exchange("allgather", bytes(data), range(self.size))

    def broadcast(self, data: bytes | None, root: int = 0) -> bytes:
        mine = bytes(data) if self.rank == root else b""
        return self._exchange(f"broadcast from rank {root}", mine, [root])[0]

    def barrier(self) -> None:
        self._exchange("barrier", b"", [])

    def split(self, color: int, key: int) -> "StoreBootstrap":
        every = self.allgather_obj((int(color), int(key)))
        members = sorted((k, q) for q, (c, k) in enumerate(every) if c == color)
        child = self._child(f"split{self._children}-{color}")
        return StoreBootstrap(self.base, [q for _, q in members].index(self.rank), len(members), self.timeout, child)

    def _child(self, name: str) -> str:
        self._children += 1
        return f"{self.prefix}/{name}"

    def transport(self, tuning=None):
        """A Gloo group of these ranks on the same store (a collective call)."""
        from ..transport.gloo import GlooTransport
        busy = self.busy()
        prefix = self._child(f"gloo{self._children}")
        self.barrier()  # every rank is here: Gloo's own connect waits only for ranks that are
        return GlooTransport.connect(self.base, prefix, self.rank, self.size, busy, tuning,
                                     _gloo_wait_s(self.timeout))

    def __repr__(self) -> str:
        return f"<StoreBootstrap {self.prefix!r} rank {self.rank}/{self.size}>"
