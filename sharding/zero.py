"""ZeroOptimizer: ZeRO stages 0-3 over one flat buffer per unit.

What each rank keeps, per unit of Ψ_u elements on N ranks (S = Ψ_u / N);
the code asks the stage's policy (policy.py), never the stage number:

    stage  weights (compute dtype)   gradients (reduce dtype)   master f32 + optimizer state
    0      full                      full, all-reduced          full
    1      full                      full, reduce-scattered     shard
    2      full                      shard (async RS per unit)  shard
    3      shard (gathered per use)  shard (async RS per unit)  shard

Stage 3's per-use all-gathers are in gather.py, the gradient reductions in
grads.py, the check that every rank built the same model in fingerprint.py.
Over MPI the buffers the collectives read live in the node's symmetric heap,
so they read peers' memory directly (heap.py; ``symmetric=False`` opts out).

The trainer's loop, the same at every stage::

    for unit in units:                      # forward
        with opt.gather(unit) as p: ...
    for unit in reversed(units):            # backward
        with opt.gather(unit) as p: ...
        opt.reduce_grads(unit, {"W": dW, "b": db})
    norm = opt.step()

Gradients handed over are the rank's local mean gradients; ranks are
averaged (op="avg"); several reduce_grads calls for a unit before a step add
up, as torch's ``.grad`` does.
"""
from __future__ import annotations

import contextlib
import math
from collections import OrderedDict

import numpy as np

from collectives.kernels import kernels_for

from .fingerprint import check_same_model
from .gather import UnitGatherer
from .grads import GradReducer
from .heap import Buffers, heap_bytes, use_heap
from .optim import SGD, AdamW
from .policy import policy_for
from .scaler import LossScaler
from .shard import layout_unit

F32 = np.dtype(np.float32)


class _Unit:
    """Everything one rank holds for one unit."""

    def __init__(self, layout, rank):
        self.layout = layout
        self.shard = layout.shard(rank)
        self.full = None  # compute-dtype flat weights (stages 0-2)
        self.pshard = None  # compute-dtype weights of the owned range
        self.master = None  # float32 weights the optimizer updates (full at stage 0, else shard)
        self.state: dict = {}
        self.grad = None  # accumulated gradient: full (stages 0-1) or owned shard (2-3)
        self.grad_filled = False  # stages 2-3: grad holds a reduced gradient since the last step
        self.pending: list = []  # stages 2-3: launched gradient reduce-scatters

    def views(self, flat) -> dict:
        return {s.name: flat[s.offset:s.end].reshape(s.shape) for s in self.layout.slots}


def _as_units(units) -> "OrderedDict[str, dict]":
    items = units.items() if hasattr(units, "items") else units
    out = OrderedDict()
    for name, params in items:
        if name in out:
            raise ValueError(f"unit {name!r} given twice")
        if not params:
            raise ValueError(f"unit {name!r} has no parameters")
        out[str(name)] = dict(params)
    if not out:
        raise ValueError("no units given")
    return out


class ZeroOptimizer:
    """ZeRO-sharded optimizer over units of named arrays.

    Args:
      units: ordered units, ``{unit: {name: array}}`` (or a list of pairs).
        Rank 0's values are broadcast to every rank at construction.
      comm: a collectives.Communicator.
      stage: 0, 1, 2 or 3 (see the module docstring).
      optimizer: ``AdamW(...)`` or ``SGD(...)``.
      param_dtype: dtype the trainer computes with (float32 by default;
        bfloat16 or float16 keep float32 master weights in the shards).
      max_grad_norm: clip by the global gradient norm (torch's clip_grad_norm_).
      reduce_dtype: dtype gradients are kept and reduced in: float32 (default)
        or the compute dtype.
      loss_scale: "dynamic" (default for float16), None, or a LossScaler.
      prefetch: stage 3 all-gathers the next unit while the current one is used.
      symmetric: allocate the buffers the collectives read in the node's
        symmetric heap (``comm.alloc``), so they read peers' memory directly
        (heap.py): None (default) where the communicator runs over MPI on host
        arrays, True to require it, False for plain arrays. Every rank alike.
    """

    def __init__(self, units, comm, stage: int, optimizer, param_dtype=None, max_grad_norm: float | None = None,
                 *, reduce_dtype=None, loss_scale="auto", prefetch: bool = True, symmetric: bool | None = None):
        policy = policy_for(stage)
        if not isinstance(optimizer, (AdamW, SGD)):
            raise TypeError(f"optimizer must be sharding.AdamW or sharding.SGD, got {type(optimizer).__name__}")
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        units = _as_units(units)
        self.comm, self.stage, self.policy, self.optimizer = comm, stage, policy, optimizer
        self.max_grad_norm = max_grad_norm
        self.world, self.rank = comm.size, comm.rank
        self.param_dtype = np.dtype(param_dtype) if param_dtype is not None else F32
        self.reduce_dtype = np.dtype(reduce_dtype) if reduce_dtype is not None else F32
        for what, dt in (("param_dtype", self.param_dtype), ("reduce_dtype", self.reduce_dtype)):
            if dt.name not in ("float32", "bfloat16", "float16"):
                raise TypeError(f"{what} must be float32, bfloat16 or float16, got {dt}")
        if loss_scale == "auto":
            loss_scale = "dynamic" if self.param_dtype == np.float16 else None
        self.scaler = LossScaler() if loss_scale == "dynamic" else loss_scale
        self.prefetch = prefetch
        first = next(iter(next(iter(units.values())).values()))
        self.k = kernels_for(first)
        self.xp = self.k.xp
        self.symmetric = use_heap(comm, self.xp, symmetric, lambda: heap_bytes(
            policy, [layout_unit(n, [(k, tuple(a.shape)) for k, a in p.items()], self.world) for n, p in units.items()],
            self.param_dtype, self.reduce_dtype))
        check_same_model(comm, units, stage, self.param_dtype, self.reduce_dtype, self.symmetric)
        self.step_count = 0
        self.buffers = Buffers(comm, self.xp, self.symmetric)
        self.reducer = GradReducer(comm, policy, self.k, self.reduce_dtype, self.buffers)
        self.stats = self.reducer.stats  # grad_wait_s, reduce_launched, reduce_done_before_step
        self.units: "OrderedDict[str, _Unit]" = OrderedDict()
        for name, params in units.items():
            self.units[name] = self._build(name, params)
        self._order = list(self.units)
        self.reducer.make_pool(self.units.values())
        self.gatherer = (UnitGatherer(comm, self.units, self.param_dtype, self.xp, prefetch)
                         if self.policy.gather_per_use else None)  # stage 3's per-use all-gathers

    # ------------------------------------------------------------ construction
    def _build(self, name, params) -> _Unit:
        shapes = [(n, tuple(a.shape)) for n, a in params.items()]
        u = _Unit(layout_unit(name, shapes, self.world), self.rank)
        lay, xp = u.layout, self.xp
        init = xp.zeros(lay.padded, F32)
        for s in lay.slots:
            init[s.offset:s.end] = xp.asarray(params[s.name], dtype=F32).reshape(-1)
        self.comm.broadcast(init, root=0, out=init)  # as DDP does: rank 0's weights everywhere
        pol, sl = self.policy, u.shard.slice()
        if not pol.shard_state:
            u.master = init
            u.full = init if self.param_dtype == F32 else init.astype(self.param_dtype)
            u.pshard = u.full
        else:  # what the collectives read: in the heap when symmetric (heap.py)
            u.master = init[sl].copy()
            if not pol.shard_weights:
                u.full = self.buffers.copy_of(init, self.param_dtype)  # a fresh array even for float32
                u.pshard = u.full[sl]
            else:
                u.pshard = self.buffers.copy_of(init[sl], self.param_dtype)
        for sname in self.optimizer.state_names():
            u.state[sname] = xp.zeros_like(u.master)
        u.grad = self.reducer.buffer(u)
        return u

    def _unit(self, unit) -> _Unit:
        try:
            return self.units[unit]
        except KeyError:
            raise KeyError(f"unknown unit {unit!r}; units are {self._order}") from None

    # ------------------------------------------------------------------ weights
    @property
    def loss_scale(self) -> float:
        """The factor the trainer multiplies its loss by (1.0 without loss scaling)."""
        return self.scaler.scale if self.scaler is not None else 1.0

    @contextlib.contextmanager
    def gather(self, unit: str, direction: str = "auto"):
        """The unit's full weights (compute dtype) as ``{name: array}``, for the block.

        At stage 3 they are all-gathered (or taken from a prefetch) on entry,
        the next unit is prefetched (forward order while the indices grow,
        reverse once they shrink or repeat, i.e. in the backward), and they
        are freed on exit. At stages 0-2 the views are of the kept weights.

        Args:
          unit: unit name.
          direction: "auto", "forward", "backward" or "none" (no prefetch).
        """
        u = self._unit(unit)
        if not self.policy.gather_per_use:
            yield u.views(u.full)
            return
        with self.gatherer.use(unit, direction) as full:
            yield u.views(full)

    def drop_prefetches(self) -> None:
        """Free stage 3's prefetched units (before a checkpoint or a full-weights read)."""
        if self.gatherer is not None:
            self.gatherer.drop_prefetches()

    def full_params(self) -> dict:
        """All current weights as host float32 numpy arrays, ``{unit: {name: array}}``.
        At stage 3 this is a collective: every rank must call it."""
        self.drop_prefetches()
        out = {}
        for name, u in self.units.items():
            if self.policy.shard_weights:
                full = self.comm.all_gather(u.pshard, out=self.xp.empty(u.layout.padded, self.param_dtype))
            else:
                full = u.full
            host = full.get() if hasattr(full, "get") else full
            out[name] = {k: np.array(v, dtype=np.float32) for k, v in u.views(host).items()}
        return out

    # -------------------------------------------------------------- gradients
    def reduce_grads(self, unit: str, grads: dict) -> None:
        """Hand over a unit's local gradients ``{name: array}`` (every name of the unit).

        Stages 0-1 add them to the full gradient buffer (reduced in step()).
        Stages 2-3 reduce-scatter them now, asynchronously; the rest of the
        trainer's backward runs meanwhile and only the owned shard is kept.
        """
        self.reducer.add(unit, self._unit(unit), grads)

    # ------------------------------------------------------------------ step
    def step(self) -> float:
        """Finish the gradient reductions, clip, update the owned weights and
        gather them as the stage requires. Returns the global gradient norm
        (of the unscaled gradients); with float16 loss scaling an overflow on
        any rank skips the step on every rank and returns inf."""
        self.drop_prefetches()
        grads = self.reducer.finish(self.units.values())
        sumsq = sum(float(self.xp.dot(g.astype(np.float64), g.astype(np.float64))) for g in grads)
        if self.policy.shard_state and self.world > 1:  # each rank summed its own shard
            sumsq = float(self.comm.all_reduce(np.array([sumsq], np.float64), op="sum")[0])
        inv = 1.0 / self.loss_scale
        norm = math.sqrt(sumsq) * inv if math.isfinite(sumsq) else math.inf
        if self.scaler is not None and not math.isfinite(norm):
            self.scaler.update(True)
            self._zero_grads()
            return math.inf
        scale = inv
        if self.max_grad_norm is not None:
            # torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1, in float32
            coef = min(float(np.float32(self.max_grad_norm) / (np.float32(norm) + np.float32(1e-6))), 1.0)
            scale = float(np.float32(inv) * np.float32(coef)) if inv != 1.0 else coef
        self.step_count += 1
        for u, g in zip(self.units.values(), grads):
            lowp = u.pshard if (self.param_dtype != F32 and u.pshard is not u.master) else None
            self.optimizer.update(u.master, g, u.state, self.step_count, grad_scale=scale, out_lowp=lowp)
            if lowp is None and u.pshard is not u.master:
                self.k.copy(u.pshard, u.master)
        if self.policy.gather_after_step:
            works = [self.comm.all_gather(u.pshard, out=u.full, async_op=True) for u in self.units.values()]
            for w in works:
                w.wait()
        self._zero_grads()
        if self.scaler is not None:
            self.scaler.update(False)
        return norm

    def _zero_grads(self) -> None:
        self.reducer.zero(self.units.values())

    # ------------------------------------------------------------ reporting
    def memory_report(self) -> dict:
        """Bytes this rank holds now, by category, measured from the live arrays."""
        from .memory import measure
        return measure(self)

    def save_checkpoint(self, directory, **kw) -> str:
        """Write this rank's shards and the metadata (collective; see sharding/checkpoint.py)."""
        from .checkpoint import save
        return save(self, directory, **kw)

    def load_checkpoint(self, directory) -> None:
        """Load a checkpoint written on any number of ranks and any stage (collective).
        The checkpoint's optimizer settings and max_grad_norm replace this optimizer's
        (its state is allocated to match); change them after loading if needed."""
        from .checkpoint import load
        load(self, directory)
