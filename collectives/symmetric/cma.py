"""Reading a peer's ordinary (private) array in one copy: Linux cross-memory
attach (``process_vm_readv``), the single copy Open MPI's shared-memory
transport makes for large messages.

A staged all-gather copies every piece three times (into the stage window,
out of it into each peer's ``out``, and the own piece); MPI's copies it twice.
Where the copies run from a fast cache the three still win (staged 1.6-2.5x raw
MPI from 128 KiB to 2 MiB of output on one 2-core machine), but on another they
lose from 16 KiB pieces (0.59-0.86x), while reading in place is at least level
with MPI on both (bench/results/2026-12-02-cpu2b-all-gather/). So from the
tuning table's ``cma_min_bytes`` a piece (``bench/tune.py`` measures it) an
all-gather rank whose input is private posts its address instead of staging it
(source window ``CMA_WIN``; in place, inside its ``out``, only past
``stage_max_in_place``: there staging copies as much and needs no wait for
readers, see ``offers``); each peer reads
it straight into its ``out`` with ``process_vm_readv``, and the owner waits
until every peer is done reading before it returns, as a heap input's owner
does. A broadcast's root offers its private input the same way from
``cma_min_bytes``; ``offers`` is the one rule for both. An all-reduce past the
stage limit offers its x and out (allreduce.py's ``offers`` and ``read_in_place``). Used where the node's
ranks agreed at start that the kernel allows it (``probe``: same user, no
ptrace restriction) and the tuning table's ``cma`` is on. A C program reads
the address each peer posts in every call, so a peer may pass a new array each
time (csrc/fastpath.c's CMAREAD).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..errors import CollectiveError
from ..roads import Road
from .signals import CMA_WIN  # noqa: F401  (the posted source window of an input read in place)


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _readv = _libc.process_vm_readv
    _readv.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                       ctypes.c_ulong]
    _readv.restype = ctypes.c_ssize_t
except (OSError, AttributeError):  # not Linux, or a libc without it
    _readv = None


class Remote:
    """``nbytes`` at ``addr`` in process ``pid``'s memory (what ``read`` copies from)."""

    __slots__ = ("pid", "addr", "nbytes", "rank")

    def __init__(self, pid: int, addr: int, nbytes: int, rank: int):
        self.pid, self.addr, self.nbytes, self.rank = pid, addr, nbytes, rank


def read(dst: np.ndarray, src: Remote) -> None:
    """Copy ``src`` into ``dst`` (C-contiguous, ``src.nbytes`` long); OSError naming the peer."""
    at, done = dst.__array_interface__["data"][0], 0
    while done < src.nbytes:
        local = _Iovec(at + done, src.nbytes - done)
        remote = _Iovec(src.addr + done, src.nbytes - done)
        got = _readv(src.pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got <= 0:
            err = ctypes.get_errno()
            raise OSError(err, f"process_vm_readv of {src.nbytes} bytes from node rank {src.rank} (pid {src.pid}) "
                               f"failed after {done}: {os.strerror(err)}")
        done += got


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def cma_read(ctx, dst: np.ndarray, src: Remote) -> None:
    """``read`` inside a collective: a failure is a CollectiveError naming the rank and call."""
    try:
        read(dst, src)
    except OSError as e:
        raise CollectiveError(f"rank {ctx.rank}: {ctx.label}: {e}") from e


def offers(d, kind: str, x, out, xloc, piece: int) -> bool:
    """Whether this rank offers its input to be read in place in a call on the Direct ``d``:
    a private input (``xloc`` None) of ``cma_min_bytes`` or more (``piece``: an all-gather's
    largest piece, a broadcast's whole input), where the node's kernel allows it; an
    all-gather's where the call would not pipe, and, in place (x inside out), where a staged
    call would leave for point-to-point messages (the staged-ring) or the piece is past the
    tuning's ``stage_max_in_place``: staging copies the piece once as reading does and needs
    no wait for readers, which wins on some machines and loses on others (its setting says
    where it was measured)."""
    if xloc is not None or d.pids is None or piece < d.tuning.cma_min_bytes:
        return False
    if kind == "broadcast":
        return True
    road = d.if_staged(kind, out.nbytes, piece, x.dtype)
    return road is not Road.PIPE and (road is Road.STAGED_RING or piece > d.tuning.stage_max_in_place
                                      or not np.may_share_memory(x, out))


def probe(node, enabled: bool = True) -> list[int] | None:
    """The pid of every rank of ``node`` (a bootstrap) when every rank can read its next
    peer's memory, else None (agreed: a collective call): None off Linux, when not
    ``enabled`` (the tuning table's cma), or where the kernel refuses (another user,
    Yama's ptrace_scope)."""
    ok = _readv is not None and enabled
    mine = np.full(8, node.rank + 1, np.int64)
    pids, addrs = zip(*node.allgather_obj((os.getpid(), mine.__array_interface__["data"][0])))
    if ok and node.size > 1:
        q = (node.rank + 1) % node.size
        got = np.zeros(8, np.int64)
        try:
            read(got, Remote(pids[q], addrs[q], got.nbytes, q))
            ok = bool((got == q + 1).all())
        except OSError:
            ok = False
    ok = all(node.allgather_obj(ok))  # every peer has read ``mine`` by now: it may go
    return list(pids) if ok else None
