"""One rank's workspace: device memory its neighbours write into, and its host-mapped record.

    ws = Workspace(backend, Geometry(channels=16, slots=8, slot_bytes=128 << 10, stage_bytes=1 << 20))
    handle = ws.export()                     # CUDA IPC handle, sent once over the bootstrap
    peers = map_peers(backend, ws, allgather)  # every rank's workspace, as this process sees it

The device part (layout.Geometry: counters, slots, staging) is zeroed once here and
never again between calls: counters only grow. The host-mapped part is pinned memory
the kernels write the error record into and read the host's abort word from. After a
failure every rank calls :meth:`Workspace.reset` (no kernel running anywhere), then the
ranks meet (a bootstrap barrier) before the next call.
"""
from __future__ import annotations

import ctypes
from typing import Callable

from .layout import PROBE_RESULT_BYTES, U64, Err, Geometry

_ABORT_AT = 128     # byte offsets in the host-mapped block
_PROBE_AT = 192
_MAPPED_BYTES = 256


class Workspace:
    """A rank's device workspace plus its pinned error record, abort word and probe result.

    Args:
      backend: the device (backend.Backend).
      geometry: sizes of slots and staging.
    """

    def __init__(self, backend, geometry: Geometry):
        self.backend, self.geometry = backend, geometry
        self.mem = backend.device_alloc(geometry.nbytes)
        self.ptr = int(self.mem.ptr)
        self.mapped = backend.mapped_alloc(_MAPPED_BYTES)
        host = int(self.mapped.host)
        self.err = Err.from_address(host)
        self.host_abort = U64.from_address(host + _ABORT_AT)
        self.probe_result = (U64 * 3).from_address(host + _PROBE_AT)
        dev = int(self.mapped.ptr)
        self.err_ptr, self.abort_ptr, self.probe_ptr = dev, dev + _ABORT_AT, dev + _PROBE_AT
        assert ctypes.sizeof(Err) <= _ABORT_AT and PROBE_RESULT_BYTES <= _MAPPED_BYTES - _PROBE_AT
        self.reset()

    def reset(self) -> None:
        """Zero every counter, the error record and the abort word (no kernel may be running)."""
        self.backend.memset(self.ptr, 0, self.geometry.counters_bytes)
        ctypes.memset(ctypes.addressof(self.err), 0, _MAPPED_BYTES)

    def abort(self) -> None:
        """Make every block of this rank's kernels leave (they watch the host abort word)."""
        self.host_abort.value = 1

    def failed(self) -> bool:
        """A kernel of this rank wrote its error record."""
        return bool(self.err.valid)

    def export(self) -> bytes:
        """The CUDA IPC handle of the device part, for the peers to map once."""
        return self.backend.ipc_handle(self.ptr)


def map_peers(backend, own: Workspace, rank: int, allgather: Callable[[bytes], list[bytes]]) -> list[int]:
    """Every rank's workspace address in this process, from one exchange of IPC handles.

    Args:
      backend: the device.
      own: this rank's workspace.
      rank: this rank.
      allgather: the bootstrap's allgather of bytes (one entry per rank, in rank order).
    """
    handles = allgather(own.export())
    return [own.ptr if r == rank else backend.ipc_open(h) for r, h in enumerate(handles)]
