"""What a Communicator holds besides its calls: scratch buffers, the device transport,
the baseline, the node's heap (staging on or off), and their release.

``Resources`` is Communicator's base: every attribute it uses is set in
Communicator.__init__ or in ``setup_resources``.
"""
from __future__ import annotations

import numpy as np

from . import roads
from .kernels import NUMPY_KERNELS


class Resources:
    """Scratch, transports, baseline and heap of a Communicator."""

    def setup_resources(self) -> None:
        self.scratch: dict = {}
        self.host_scratch = self.scratch_for(NUMPY_KERNELS)
        self._device = None
        self._kring = None  # the GPU kernel ring: made on the first device call that may take it

    def scratch_for(self, kernels):
        """scratch(name, n, dtype, host=False): reusable buffers where ``kernels`` computes
        (host=True: always host memory, for headers). Fresh allocations would
        page-fault on every call."""
        def scratch(name, n, dtype, host=False):
            k = NUMPY_KERNELS if host else kernels
            key = (name, np.dtype(dtype).str, k.name, getattr(k, "_device", None))
            buf = self.scratch.get(key)
            if buf is None or buf.size < n:
                buf = k.empty(max(n, 1), dtype)
                self.scratch[key] = buf
            return buf[:n]
        return scratch

    def device_transport(self):
        """The transport for device (cupy) buffers: CUDA-aware MPI, CUDA IPC or
        pinned-host staging (transport/device/), made on first use."""
        if self._device is None:
            from .transport.device import make_device_transport
            self._device = make_device_transport(self.transport, bootstrap=self.bootstrap)
        return self._device

    def kernel_ring_serves(self, kind: str, dtype, op, nbytes: int) -> bool:
        """Whether the GPU kernel ring (collectives/gpu_ring) takes this device call: the tuning's
        cuda_ring on (or the road forced), the ring connected, the kernels covering the call."""
        if not (self.tuning.cuda_ring or self.forced.get(kind) is roads.Road.CUDA_RING):
            return False
        if self.bootstrap is None or self.kernel_ring() is None:
            return False
        from .gpu_ring.road import can_serve
        return can_serve(kind, dtype, "sum" if op == "avg" else op, nbytes, self.size).ok

    def kernel_ring(self):
        """The GPU kernel ring of this process's rank, connected once over the bootstrap (a
        collective call: every rank makes it at its first device call), or None where it cannot
        run (no cupy or GPU; ranks sharing a GPU without MPS): every rank learns every verdict."""
        if self._kring is None:
            try:
                import cupy

                from .gpu_ring.backend import CupyBackend
                from .gpu_ring.ring import Ring
                backend = CupyBackend(cupy, cupy.cuda.Device().id)
                ring = Ring.connect(backend, self.rank, self.size, self.bootstrap.allgather, timeout_s=self.timeout)
                self._kring = ring if ring.residency.ok else False
            except (ImportError, RuntimeError, OSError) as e:
                self._kring = False
                self.kernel_ring_error = e
        return self._kring or None

    def _baseline(self, algorithm: str):
        """Other libraries' collectives (collectives/baselines), made only when asked for."""
        if algorithm == "mpi":
            if getattr(self.bootstrap, "mpi_comm", None) is None:  # checked before mpi4py initialises MPI
                raise ValueError(f"algorithm='mpi' (MPI's own collectives, a baseline) needs an MPI world: ranks "
                                 f"an MPI launcher started (mpirun, srun --mpi=pmix); this communicator's ranks "
                                 f"met through {type(self.bootstrap).__name__} (a store world: torchrun, "
                                 f"mp.spawn), where MPI is never initialised. Use algorithm='ring'")
            from .baselines.mpi import MpiAlgorithm
            return MpiAlgorithm(self.bootstrap)
        if algorithm == "nccl":
            from .baselines.nccl import NcclAlgorithm  # a clear error without cupy or NCCL
            return NcclAlgorithm(self.bootstrap)
        return None

    def setup_staging(self, mode: str) -> None:
        """Make the node's heap now when ordinary host arrays are staged (symmetric.stages):
        with ``mode`` "1" or a forced direct road always, "auto" where it was measured to
        win (one node of the tuning table's stage_ranks ranks)."""
        from .symmetric import stages
        forced_direct = any(r in roads.DIRECT_ROADS for r in self.forced.values())
        if self.bootstrap is None or not stages(mode, self.algorithm, self.size, self.tuning, forced_direct):
            return
        sym = self.make_symmetric(stage=True)
        if mode == "auto" and not forced_direct and not sym.single_node:
            sym.close()  # several nodes: the ring (staging there only when asked, mode "1")
            return
        self.symmetric = sym

    def make_symmetric(self, stage: bool):
        """The node's heap and direct roads (a collective call over the bootstrap)."""
        if self.bootstrap is None:
            raise TypeError(f"alloc needs a communicator whose ranks share a node's memory (a bootstrap); this one "
                            f"runs over {type(self.transport).__name__} alone")
        from .symmetric import Symmetric
        t = self.tuning

        def rail(boot):  # the ring between nodes, as every caller sees it: it stages nothing
            return type(self)(bootstrap=boot, timeout=self.timeout, chunk_bytes=self.chunk_bytes,
                              small_bytes=self.small_bytes, stage="0")
        return Symmetric(self.bootstrap, t, self.transport.policy, direct=self.algorithm == "ring", stage=stage,
                         forced=self.forced, make_rail=rail)

    def heap_fits(self, nbytes: int) -> tuple[bool, str]:
        """Whether every node's shared memory has room for ``nbytes`` more heap bytes per rank,
        agreed on every rank (a collective call): (answer, what is short where)."""
        if self.bootstrap is None:
            return False, "no bootstrap: ranks share no heap"
        from .bootstrap import host_identity
        from .symmetric.shm import free_bytes
        hosts = self.bootstrap.allgather_obj(host_identity())
        local = hosts.count(hosts[self.rank])
        try:
            free, total = free_bytes(self.tuning.shm_dir)
        except OSError as e:
            free, total = 0, 0
            short = f"{self.tuning.shm_dir}: {e}"
        else:
            short = "" if free >= nbytes * local else (f"{nbytes} bytes for each of {local} ranks do not fit in "
                                                         f"{self.tuning.shm_dir} ({free} of {total} bytes free)")
        shorts = [x for x in self.bootstrap.allgather_obj(short) if x]
        return not shorts, "; ".join(dict.fromkeys(shorts))

    def scratch_bytes(self) -> int:
        """Bytes of the reusable communication buffers this communicator holds now."""
        # a snapshot first: the progress thread may add a buffer meanwhile, and
        # iterating a dict that grows raises "dictionary changed size"
        return sum(b.nbytes for b in tuple(self.scratch.values()))

    def memory_bytes(self) -> dict[str, int]:
        """Bytes this communicator holds now for its own use, by part: ``scratch``
        (receive, partial-sum and agreement buffers) and ``symmetric`` (the heap's
        scratch, stage and control windows; not the arrays ``alloc`` returned)."""
        sym = self.symmetric
        return {"scratch": self.scratch_bytes(), "symmetric": sym.heap.overhead_bytes() if sym is not None else 0}

    def close(self) -> None:
        """Finish queued work and release the progress thread, the heap and the transports."""
        self.engine.close()
        if self.symmetric is not None:
            self.symmetric.close()
        if self.baseline is not None:
            self.baseline.close()
        if self._device is not None:
            self._device.close()
        self.transport.close()
        if self.bootstrap is not None:
            self.bootstrap.close()
