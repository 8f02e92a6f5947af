"""Each collective's two C programs (one per epoch parity), written with writer.Writer.

``all_reduce``, ``reduce_scatter``, ``all_gather`` and ``broadcast`` write a call's
programs the way the direct roads run it (symmetric/allreduce.py, gather.py,
scatter.py, direct.py) on the road the Python call took, or say False where a
program cannot cover that call.
"""
from __future__ import annotations

import numpy as np

from ..roads import Road
from ..safety.agree import NF
from ..symmetric import stage
from ..symmetric.cma import address
from ..symmetric.signals import CMA_WIN, DONE, INPUT, PRIVATE, READY, REDUCED, STAGE_WIN
from .codes import C, c_reduces


def all_reduce(w, d, x, out, op, xloc, oloc, road) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not c_reduces(dt, op):
        return False
    if road is Road.DIRECT and all(s[0] == CMA_WIN for s in w.src):
        return _read_in_place(w, d, x, out, op)
    if road is Road.PUSH:
        return _push(w, d, x, out, op, xloc, oloc)
    if road is not Road.ONE_PHASE:
        return False  # the pull stays in Python
    # out overlaps our heap input, which peers read: reduced aside, copied once every peer is done
    aside = xloc is not None and oloc is not None and oloc[0] == xloc[0] and abs(oloc[1] - xloc[1]) < x.nbytes
    tmp = np.empty_like(x) if aside else None
    dst = oloc if oloc is not None else (STAGE_WIN, 0) if xloc is None else (PRIVATE, PRIVATE)
    if tuple(w.dst[r]) != tuple(dst):
        return False
    for par in (0, 1):
        if not w.start(par, x, xloc, dst, x.nbytes):
            return False
        srcs = [w.src_view(q, par, x.size, dt) for q in range(n)]
        if xloc is None and (n == 2 or not np.shares_memory(x, out)):
            srcs[r] = x
        w.reduce(op, tmp if aside else out, srcs, into_out=not aside)
        if aside:
            w.keep.append(tmp)
            w.finish(xloc, then=(out, tmp))
        else:
            w.finish(xloc)
    return True


def reduce_scatter(w, d, x, out, op, counts, xloc) -> bool:
    n, r, dt = d.size, d.rank, x.dtype
    if not c_reduces(dt, op):
        return False
    (o, c), = stage.ranges_of(counts)[r]
    for par in (0, 1):
        parts = stage.rs_parts(d, x, out, xloc, counts, None, tuple(counts))  # staged: only what peers read
        if not w.start(par, x, xloc, (PRIVATE, PRIVATE), x.nbytes, parts):
            return False
        dst = out[:c]
        srcs = [w.src_view(q, par, x.size, dt)[o:o + c] for q in range(n)]
        if xloc is None and (n == 2 or not np.shares_memory(x[o:o + c], dst)):
            srcs[r] = x[o:o + c]
        w.reduce(op, dst, srcs, into_out=True)
        w.finish(xloc)
    return True


def all_gather(w, d, x, out, counts, xloc, oloc, road) -> bool:
    """Peers' pieces first (views, or read in place with process_vm_readv), then done
    reading, then our own piece's copy, then the wait when peers read our input: the
    order of the direct all-gather. The push writes the Python plan's own chunks,
    the same in both epoch parities."""
    r, dt = d.rank, x.dtype
    offered = w.src[r][0] == CMA_WIN
    if offered and d.pids is None:
        return False
    dst = oloc if oloc is not None else (PRIVATE, PRIVATE)
    if tuple(w.dst[r]) != tuple(dst):
        return False
    push = d.all_gather_.push_plan(x.size, dt, counts) if road is Road.PUSH else None
    for par in (0, 1):
        if not w.start(par, x, xloc, dst, max(counts) * dt.itemsize):
            return False
        if push is not None:
            for src, dsts in push:
                for t in dsts:
                    w.copy(t, src)
                    src = t
            w.finish(0)
            continue
        own = None
        for q, ((o, c),) in enumerate(stage.ranges_of(counts)):
            if q == r:
                own = (out[o:o + c], x[:c] if xloc is None else w.src_view(q, par, c, dt))
            elif w.src[q][0] == CMA_WIN:  # at the address q posts in this call's header area
                w.cur += [C.CMAREAD, d.pids[q], w.area(q, par) + 8 * (NF + 1), 0, address(out[o:o + c]),
                          c * dt.itemsize]
            else:
                w.copy(out[o:o + c], w.src_view(q, par, c, dt), into_out=True)
        w.cur += [C.RAISE, w.slot[r], DONE]
        if own is not None and not np.shares_memory(own[1], out):  # in place: already there
            w.copy(*own, into_out=True)
        if xloc is not None or offered:
            w.wait_peers(DONE)
        w.end()
    if push is not None:
        w.keep.append(push)
    return True


def broadcast(w, d, x, out, root, xloc) -> bool:
    """Direct.broadcast's steps: the root stages its input, posts its heap array or offers x
    in place, and copies it into its out; every other rank copies (or reads) it into its out."""
    r = d.rank
    staged = w.src[root][0] == PRIVATE
    offered = w.src[root][0] == CMA_WIN  # the root's private input read in place (cma.py)
    if offered and d.pids is None:
        return False
    if staged:
        need = 2 * ((x.nbytes + 63) // 64 * 64)
        if d.stage_window is None or d.stage_window.nbytes < need:
            return False
        w.stage = d.stage_window
    for par in (0, 1):
        mine = xloc if xloc is not None else w.src[r] if r == root and offered else (PRIVATE, PRIVATE)
        if r == root and xloc is None and not offered:  # our input into the stage half of this call, before posting
            w.copy(d.staged_view(r, par, x.nbytes).view(x.dtype), x)
        w.post(par, mine, (PRIVATE, PRIVATE), INPUT if r == root or xloc is not None else READY)
        w.wait_peers(READY)
        w.hcheck(par)
        w.lcheck(par)
        if r == root:
            if address(out) != address(x):
                w.copy(out, x, into_out=True)
            w.cur += [C.RAISE, w.slot[r], DONE]
            if xloc is not None or offered:  # peers read our heap input, or x in place: wait until they are done
                w.wait_peers(DONE)
        else:
            if staged:
                w.cur += [C.WAIT, w.slot[root], INPUT, root, INPUT]
            if offered:  # at the address the root posts in this call's header area
                w.cur += [C.CMAREAD, d.pids[root], w.area(root, par) + 8 * (NF + 1), 0, address(out), x.nbytes]
            else:
                w.copy(out, w.src_view(root, par, x.size, x.dtype), into_out=True)
            w.cur += [C.RAISE, w.slot[r], DONE]
        w.end()
    return True


def _read_in_place(w, d, x, out, op) -> bool:
    """The all-reduce read in place (allreduce.py's read_in_place, from its read_plan): each
    chunk of our segment read from every peer's x at the address it posts in this call,
    reduced into our out; REDUCED; every peer's reduced segment read from its out (at its
    posted address) into ours once it says so; done, and the wait."""
    if d.pids is None or w.dst[d.rank][0] != CMA_WIN:
        return False
    plan = d.all_reduce_.read_plan(x, out)  # its scratch lives with the communicator, as the lane's copies may
    for par in (0, 1):
        if not w.start(par, x, None, (CMA_WIN, address(out)), x.nbytes):
            return False
        for ours, srcs, at in plan.chunks:
            for buf, q in zip(srcs[1:], w.others):  # x's address, posted at NF + 1
                w.cur += [C.CMAREAD, d.pids[q], w.area(q, par) + 8 * (NF + 1), at, address(buf), buf.nbytes]
            w.reduce(op, ours, srcs)
        w.cur += [C.RAISE, w.slot[d.rank], REDUCED]
        for q, seg, at in plan.gathers:
            w.cur += [C.WAIT, w.slot[q], REDUCED, q, REDUCED]
            if seg.size:  # out's address, posted at NF + 3
                w.cur += [C.CMAREAD, d.pids[q], w.area(q, par) + 8 * (NF + 3), at, address(seg), seg.nbytes]
        w.finish(0)
    return True


def _push(w, d, x, out, op, xloc, oloc) -> bool:
    """The pushed all-reduce (every destination in the heap, no input staged): reduce a
    chunk, write it into every destination, done; the chunks are the Python plan's own
    views, the same in both epoch parities when nothing is staged."""
    if oloc is None or xloc is None or any(s[0] < 0 for s in w.src) or tuple(w.dst[d.rank]) != tuple(oloc):
        return False
    chunks = d.all_reduce_.plan(out, x.size, x.dtype, tuple(w.dst), None).chunks  # a Pushed (d.road is PUSH)
    for par in (0, 1):
        if not w.start(par, x, xloc, oloc, x.nbytes):
            return False
        for dst, srcs, pushes in chunks:
            w.reduce(op, dst, srcs)
            for p in pushes:
                w.copy(p, dst)
        w.finish(xloc)
    w.keep.append(chunks)
    return True
