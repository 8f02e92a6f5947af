"""Run N simulated ranks as threads in one process, over the in-process transport.

    results = simulate(4, lambda comm: comm.all_reduce(np.arange(8.0) * comm.rank))

Each thread gets its own Communicator on a shared Fabric; the ring code is
the same that runs under mpirun.
"""
from __future__ import annotations

import threading

from ..communicator import Communicator
from ..transport.inproc import Fabric


def simulate(world: int, fn, *, timeout: float = 30.0, return_exceptions: bool = False, **comm_kwargs) -> list:
    """Call ``fn(comm)`` on ``world`` simulated ranks; return their results in rank order.

    Args:
      world: number of ranks (threads).
      fn: called once per rank with that rank's Communicator.
      timeout: each collective's deadline, in seconds.
      return_exceptions: put a rank's exception in its slot instead of raising
        the first one.
      comm_kwargs: passed to Communicator (chunk_bytes, small_bytes, tracer, ...).
    """
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    fabric = Fabric(world)
    results: list = [None] * world
    errors: list = [None] * world

    def run(rank: int) -> None:
        comm = None
        try:  # a bad keyword fails the constructor: reported like any other error
            comm = Communicator(transport=fabric.transport(rank), timeout=timeout, **comm_kwargs)
            results[rank] = fn(comm)
        except BaseException as e:  # reported below, per rank
            errors[rank] = e
        finally:
            if comm is not None:
                comm.close()

    threads = [threading.Thread(target=run, args=(r,), name=f"sim-rank-{r}") for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if return_exceptions:
        return [e if e is not None else r for r, e in zip(results, errors)]
    for e in errors:
        if e is not None:
            raise e
    return results
