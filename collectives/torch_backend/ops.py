"""The process group's torch-side helpers: reduce ops in the Communicator's words,
the Work it returns, and contiguous staging of the caller's tensors."""
from __future__ import annotations

import threading

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from ..dtypes import torch_dtypes
from ..errors import CollectiveTimeout
from .errors import torch_error

_OPS = {ReduceOp.SUM: "sum", ReduceOp.AVG: "avg", ReduceOp.PRODUCT: "prod", ReduceOp.MIN: "min",
        ReduceOp.MAX: "max", ReduceOp.BAND: "band", ReduceOp.BOR: "bor", ReduceOp.BXOR: "bxor"}
# Keyed by the enum's integer: hashing a pybind enum costs ~1.5 us, its .value ~0.2 us.
OP_NAMES = {kind.value: name for kind, name in _OPS.items()}


def _hash_is_kind() -> bool:
    """Whether ``hash(ReduceOp)`` is its kind's integer (torch 2.x defines it so): then
    ``op_name`` takes 0.1 us instead of 1.2 us (``opts.reduceOp.op.value``)."""
    return all(hash(ReduceOp(kind)) == kind.value for kind in _OPS)


_HASH_IS_KIND = _hash_is_kind()


def plain_op(op) -> str | None:
    """op_name of ``opts.reduceOp`` (always a ReduceOp) with no further call where
    the enum's hash is its kind (0.1 us); None for PREMUL_SUM and unsupported ops."""
    return OP_NAMES.get(hash(op)) if _HASH_IS_KIND else op_name(op)


def op_name(op) -> str | None:
    """The Communicator's name for a plain ReduceOp (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR,
    BXOR); None for PREMUL_SUM and unsupported ops (which :func:`reduce_op` handles, or
    names in its error). ``op`` must be a ``ReduceOp`` (not a ``RedOpType``)."""
    return OP_NAMES.get(hash(op) if _HASH_IS_KIND else op.op.value)


def reduce_op(op, what: str) -> tuple[str, float | None]:
    """(Communicator op name, PREMUL_SUM factor or None) of a torch ReduceOp.

    Args:
      op: a ``ReduceOp`` (as on ``opts.reduceOp``) or a ``ReduceOp.RedOpType``.
      what: the collective, for the error message.
    """
    if type(op) is ReduceOp:
        name = op_name(op)
        if name is not None:  # the common case, without touching the pybind enum
            return name, None
        kind = op.op
    else:
        kind = op
        name = OP_NAMES.get(kind.value)
        if name is not None:
            return name, None
    if kind == ReduceOp.PREMUL_SUM:
        factor = getattr(op, "factor", None)
        if factor is None:  # torch versions without the attribute pickle it
            factor = op.__getstate__()[1]
        if isinstance(factor, torch.Tensor):
            factor = float(factor.item())
        return "sum", float(factor)
    raise ValueError(f"{what}: reduce op {kind} is not supported by the ringzero backend "
                     f"(supported: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM)")


def _succeeded(done: bool, result) -> bool:
    """Work.is_success(): whether ``result()`` returns rather than raises; asked before the end, an error."""
    if not done:
        raise RuntimeError("is_success() before the collective finished")
    try:
        result()
    except BaseException:  # noqa: BLE001  the error is what is asked about
        return False
    return True


class FutureWork(dist.Work):
    """torch's Work over a Future that the progress thread completes.

    Not ``_create_work_from_future``: the Work that makes (torch 2.13) returns
    True from ``wait()`` even when the future failed, so a mismatched call
    would pass silently. This one raises the collective's error from ``wait()``.
    """

    def __init__(self, fut: torch.futures.Future, works=()):
        super().__init__()
        self._fut = fut
        self._works = works  # the Communicator's Works that complete it

    def wait(self, timeout=None) -> bool:
        for w in self._works:  # still queued and next in line: run here, not via the thread
            w.run_here()
        try:
            self._fut.wait()  # raises the collective's error; the Communicator's deadline bounds it
        except Exception:
            for w in self._works:  # the error itself (torch's future keeps only its text)
                try:
                    w.result()
                except BaseException as e:
                    raise torch_error(e) from None
            raise
        return True

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        return _succeeded(self._fut.done(), self._fut.value)


class OneWork(dist.Work):
    """torch's Work over one queued Communicator Work (the async one-tensor lane).

    Its Future is made only when someone asks (``get_future``: DDP does, from
    C++); from then on the Communicator's progress thread completes it when the
    collective finishes, so nobody has to call ``wait()``. ``dist.all_reduce(t,
    async_op=True).wait()`` makes none: making and completing one costs more
    than a small collective's bookkeeping. ``wait()`` runs the collective on the
    waiting thread when it is next in line (Work.run_here).

    Args:
      work: the Communicator's Work of the collective.
      outputs: the future's value (the output tensors).
    """

    def __init__(self, work, outputs):
        super().__init__()
        self._work, self._outputs, self._fut = work, outputs, None
        self._lock = threading.Lock()

    def wait(self, timeout=None) -> bool:
        try:
            self._work.join()  # raises the collective's error; the Communicator's deadline bounds it
        except CollectiveTimeout as e:
            raise torch_error(e) from None
        return True

    def get_future(self) -> torch.futures.Future:
        with self._lock:
            if self._fut is None:
                self._fut = torch.futures.Future()
                self._work.add_done_callback(self._complete)  # now, if it has finished already
            return self._fut

    def _complete(self, work) -> None:
        try:
            work.result()
        except BaseException as e:  # handed to whoever waits on the future
            self._fut.set_exception(torch_error(e))
            return
        self._fut.set_result(self._outputs)

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return _succeeded(self._work.is_completed(), self._work.result)


class DoneWork(dist.Work):
    """torch's Work of a collective that already ran on the caller's thread (the
    blocking path): no Future unless someone asks for one (``get_future``), since
    making and completing one costs more than a small collective's bookkeeping.

    Args:
      outputs: the future's value (the output tensors).
      error: the collective's error, raised by ``wait()``; None when it succeeded.
    """

    __slots__ = ("_outputs", "_error", "_fut")

    def __init__(self, outputs, error: Exception | None = None):
        super().__init__()
        self._outputs, self._error, self._fut = outputs, None if error is None else torch_error(error), None

    def wait(self, timeout=None) -> bool:
        if self._error is not None:
            raise self._error
        return True

    def get_future(self) -> torch.futures.Future:
        if self._fut is None:
            fut = torch.futures.Future()
            if self._error is not None:
                fut.set_exception(self._error)
            else:
                fut.set_result(self._outputs)
            self._fut = fut
        return self._fut

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return self._error is None


class Stage:
    """Contiguous stand-ins for the caller's tensors, and the copies back once done.

    The copies back run on the progress thread, on the device's default stream,
    which the caller's stream does not wait for: on CUDA they are finished
    (synchronized) before the future completes.
    """

    def __init__(self):
        self._back: list = []
        self._devices: set = set()

    def inout(self, t):
        c = t.detach().contiguous()
        if c.data_ptr() != t.data_ptr() or c.shape != t.shape:
            self._later(t, lambda: t.detach().copy_(c))
        return c

    def _later(self, t, fn):
        self._back.append(fn)
        if t.is_cuda:
            self._devices.add(t.device)

    def input(self, t):
        return t.detach().contiguous()

    def output(self, t):
        return self.inout(t)

    def host_copy(self, t):
        h = torch.empty(t.shape, dtype=t.dtype)
        self._later(t, lambda: t.detach().copy_(h))
        return h

    def scatter_back(self, outs, dtype, device):
        flat = torch.empty(sum(o.numel() for o in outs), dtype=dtype, device=device)

        def back():
            start = 0
            for o in outs:
                o.detach().copy_(flat[start:start + o.numel()].view(o.shape))
                start += o.numel()
        self._later(flat, back)
        return flat

    def copy_back(self):
        for fn in self._back:
            fn()
        for device in self._devices:
            torch.cuda.synchronize(device)


def premul_factor(factor, t, what):
    row = _ROWS.get(t.dtype)
    if row is None or row.kind not in ("float", "half", "complex"):
        raise TypeError(f"{what}: PREMUL_SUM needs a floating-point tensor that sums "
                        f"(float16, bfloat16, float32, float64), got {t.dtype}")
    return factor


_ROWS = torch_dtypes(torch)  # the dtype table's rows by torch dtype


def same_length(a, b, what):
    if len(a) != len(b):
        raise ValueError(f"{what}: {len(a)} outputs for {len(b)} inputs")


def split_counts(t, splits, n, name, rank):
    rows = t.shape[0] if t.dim() else 1
    row = t.numel() // rows if rows else 0
    if not splits:
        if rows % n:
            raise ValueError(f"all_to_all_single on rank {rank}: {name} has {rows} rows, not divisible by {n}")
        return [rows // n * row] * n
    if len(splits) != n or sum(splits) != rows:
        raise ValueError(f"all_to_all_single on rank {rank}: {name}_split_sizes {list(splits)} do not split "
                         f"{rows} rows over {n} ranks")
    return [s * row for s in splits]
