"""Gradients of a ZeroOptimizer: accumulated per unit and averaged across
ranks as the stage's policy says.

Where the policy keeps the full gradient buffer (stages 0-1) the trainer's
gradients are added into it and the reduction runs in step(): an all-reduce
where the optimizer state is full, a reduce-scatter where it is sharded.
Where gradients are sharded (stages 2-3) each unit's gradients are
reduce-scattered as soon as they arrive, asynchronously, and only the owned
shard is kept; micro-batches that arrive before a step are folded in.
"""
from __future__ import annotations

import numpy as np

from .buckets import Pending

F32 = np.dtype(np.float32)


class GradReducer:
    """Each unit's gradient buffer and its cross-rank reduction.

    Args:
      comm: the Communicator.
      policy: the stage's StagePolicy.
      k: the kernel set of the buffers (reduce_, ...); xp: its array module.
      dtype: the dtype gradients are kept and reduced in.
      buffers: where communicated buffers are allocated (heap.py); plain arrays when None.
    """

    def __init__(self, comm, policy, k, dtype, buffers=None):
        self.comm, self.policy, self.k, self.xp, self.dtype = comm, policy, k, k.xp, dtype
        self.buffers = buffers
        self.pool = None  # stages 2-3 on the heap: the reduce-scatter inputs (heap.InputPool)
        self.stats = {"grad_wait_s": 0.0, "reduce_launched": 0, "reduce_done_before_step": 0}
        self.live: list = []  # stage 1: reduce-scatter outputs while step() runs

    def buffer(self, u):
        """A zeroed gradient buffer for unit ``u``: its shard, or the full padded unit (in the
        heap where it is reduced in place, stages 0-1)."""
        if self.policy.shard_grads:  # a reduce-scatter's output: the direct path writes it wherever it is
            return self.xp.zeros(u.shard.size, self.dtype)
        if self.buffers is not None:
            return self.buffers.zeros(u.layout.padded, self.dtype)
        return self.xp.zeros(u.layout.padded, self.dtype)

    def make_pool(self, units) -> None:
        """Stages 2-3 on the heap: the reduce-scatter inputs, sized to the largest unit."""
        from .heap import InputPool
        if self.policy.reduce_per_unit and self.buffers is not None and self.buffers.heap:
            self.pool = InputPool(self.buffers, max(u.layout.padded for u in units), self.dtype)

    def add(self, unit: str, u, grads: dict) -> None:
        """Take a unit's local gradients ``{name: array}`` (see ZeroOptimizer.reduce_grads)."""
        names = {s.name for s in u.layout.slots}
        if set(grads) != names:
            raise KeyError(f"reduce_grads({unit!r}): got gradients for {sorted(grads)}, the unit has {sorted(names)}")
        for s in u.layout.slots:
            if tuple(grads[s.name].shape) != s.shape:
                raise ValueError(f"reduce_grads({unit!r}): {s.name} has shape {tuple(grads[s.name].shape)}, "
                                 f"expected {s.shape}")
        if not self.policy.reduce_per_unit:
            for s in u.layout.slots:
                u.grad[s.offset:s.end] += grads[s.name].reshape(-1).astype(self.dtype, copy=False)
            return
        if self.pool is not None:  # a heap buffer no reduce-scatter still reads
            if u.pending:  # accumulation: fold the previous micro-batch first, keep one in flight
                self.fold(u)
            slot, flat = self.pool.take(u.layout.padded, self.fold)
        else:
            flat = self.xp.zeros(u.layout.padded, self.dtype)
        for s in u.layout.slots:
            flat[s.offset:s.end] = grads[s.name].reshape(-1)
        if u.pending:  # accumulation: fold the previous micro-batch first, keep one in flight
            self.fold(u)
        out = u.grad if not u.grad_filled else self.xp.empty(u.shard.size, self.dtype)
        work = self.comm.reduce_scatter(flat, op="avg", out=out, async_op=True)
        pend = Pending("reduce-scatter", unit).launch(work, flat, out)
        u.pending.append(pend)
        if self.pool is not None:
            self.pool.hold(slot, u, pend)
        self.stats["reduce_launched"] += 1

    def fold(self, u) -> None:
        """Wait for the unit's launched reduce-scatters and add them into its shard."""
        for pend in u.pending:
            self.stats["reduce_done_before_step"] += pend.is_completed()
            out = pend.wait()
            self.stats["grad_wait_s"] += pend.wait_s
            if out is not u.grad:
                self.k.reduce_("sum", u.grad, out)
            pend.release()
            u.grad_filled = True
        u.pending.clear()

    def finish(self, units) -> list:
        """Wait for or run every rank-reduction; return each unit's owned float32 gradient."""
        units = list(units)
        if self.policy.all_reduce_grads:
            works = [self.comm.all_reduce(u.grad, op="avg", out=u.grad, async_op=True) for u in units]
            for w in works:
                w.wait()
            return [_f32(u.grad) for u in units]
        if not self.policy.reduce_per_unit:  # reduce-scatter the full buffers now
            outs = [self.xp.empty(u.shard.size, self.dtype) for u in units]
            works = [self.comm.reduce_scatter(u.grad, op="avg", out=o, async_op=True) for u, o in zip(units, outs)]
            self.live = outs
            for w in works:
                w.wait()
            return [_f32(o) for o in outs]
        for u in units:
            self.fold(u)
        return [_f32(u.grad) for u in units]

    def zero(self, units) -> None:
        """Clear every unit's gradient for the next step."""
        self.live = []
        for u in units:
            if u.pending:
                self.fold(u)
            u.grad[...] = 0
            u.grad_filled = False


def _f32(g):
    return g if g.dtype == F32 else g.astype(F32)
