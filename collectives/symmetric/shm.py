"""Shared-memory segments every rank of a node maps: the heap's windows, on POSIX shared memory.

A window is one file per node rank in ``shm_dir`` (``/dev/shm``), named after
the job, the owner's pid and the window's index. Making one is a setup step
with three agreed outcomes, so no rank fails alone and none waits forever:

1. each rank creates its file and reserves its bytes (``posix_fallocate``:
   a node short of shared memory fails here, with ENOSPC, never later with a
   SIGBUS on first touch); every rank learns every outcome;
2. each rank maps every peer's file; every rank learns every outcome;
3. each rank unlinks its own file: from here a crash leaves nothing behind.

Files of a job that crashed between 1 and 3 are swept when the next heap on
the node starts (``sweep``: the owner's pid is gone).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import re
import secrets

import numpy as np

from ..errors import SharedMemoryError

PREFIX = "ringzero-"
_NAME = re.compile(PREFIX + r"([0-9a-f]+)-(\d+)-(\d+)$")
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
HINT = ("Give the job more shared memory (docker run --shm-size, a larger /dev/shm or RINGZERO_SHM_DIR "
        "elsewhere), or keep these buffers out of the heap (ZeroOptimizer(symmetric=False), COLLECTIVES_STAGE=0)")


def free_bytes(path: str) -> tuple[int, int]:
    """(bytes free, bytes in all) of the file system at ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def sweep(shm_dir: str) -> list[str]:
    """Remove this user's segments whose owning process is gone (a crashed job); return their names."""
    gone = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return gone
    uid = os.getuid()
    for name in names:
        m = _NAME.match(name)
        if m is None:
            continue
        path = os.path.join(shm_dir, name)
        try:
            if os.stat(path).st_uid != uid:
                continue
            os.kill(int(m.group(2)), 0)
        except ProcessLookupError:
            try:
                os.unlink(path)
                gone.append(name)
            except OSError:
                pass
        except OSError:
            continue
    return gone


class Mapping:
    """``nbytes`` of a shared file mapped at ``address`` (unmapped by ``close``)."""

    __slots__ = ("address", "nbytes", "array")

    def __init__(self, fd: int, nbytes: int):
        addr = _libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {nbytes} bytes: {os.strerror(err)}")
        self.address, self.nbytes = addr, nbytes
        self.array = np.frombuffer((ctypes.c_char * nbytes).from_address(addr), np.uint8)

    def close(self) -> None:
        if self.address is not None:
            _libc.munmap(self.address, self.nbytes)
            self.address, self.array = None, None


class Segments:
    """Makes the node's windows. A collective object: every node rank makes it, and every
    window, in the same order.

    Args:
      node: the node's bootstrap (collectives/bootstrap).
      shm_dir: where the segment files live.
    """

    def __init__(self, node, shm_dir: str):
        self.node, self.dir = node, shm_dir
        if node.rank == 0:
            sweep(shm_dir)
        self.job = node.broadcast_obj(secrets.token_hex(6) if node.rank == 0 else None)
        self.pids = node.allgather_obj(os.getpid())

    def path(self, q: int, index: int) -> str:
        return os.path.join(self.dir, f"{PREFIX}{self.job}-{self.pids[q]}-{index}")

    def window(self, nbytes: int, index: int) -> list[Mapping]:
        """Window ``index``: ``nbytes`` (rounded up to whole pages) per node rank, mapped by
        every node rank; one Mapping per node rank. SharedMemoryError on every rank when a
        segment does not fit, SetupError when a mapping fails."""
        node, size = self.node, -(-max(int(nbytes), 1) // PAGE) * PAGE
        mine, fd, detail = self.path(node.rank, index), -1, ""
        try:
            fd = os.open(mine, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            free, total = free_bytes(self.dir)
            detail = (f"{size} bytes per rank ({size * node.size} on this node of {node.size} ranks) do not fit: "
                      f"{e.strerror}; {self.dir} has {free} of {total} bytes free")
        try:
            node.agree(not detail, f"heap window {index} ({size} bytes per rank in {self.dir})", detail, HINT,
                       SharedMemoryError)
        except Exception:
            self._drop(fd, mine)
            raise
        maps, detail = [], ""
        try:
            for q in range(node.size):
                if q == node.rank:
                    maps.append(Mapping(fd, size))
                    continue
                pfd = os.open(self.path(q, index), os.O_RDWR)
                try:
                    maps.append(Mapping(pfd, size))
                finally:
                    os.close(pfd)
        except OSError as e:
            detail = f"mapping rank {len(maps)}'s segment: {e}"
        try:
            node.agree(not detail, f"mapping heap window {index}", detail)
        except Exception:
            for m in maps:
                m.close()
            self._drop(fd, mine)
            raise
        self._drop(fd, mine)  # every rank has mapped it: the name can go
        return maps

    @staticmethod
    def _drop(fd: int, path: str) -> None:
        if fd >= 0:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
