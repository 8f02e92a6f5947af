"""torch's reduce ops in the Communicator's words, and tensors as array views."""
from __future__ import annotations

import torch
from torch.distributed import ReduceOp

_OPS = {ReduceOp.SUM: "sum", ReduceOp.AVG: "avg", ReduceOp.PRODUCT: "prod",
        ReduceOp.MIN: "min", ReduceOp.MAX: "max"}


def reduce_op(op, what: str) -> tuple[str, float | None]:
    """(Communicator op name, PREMUL_SUM factor or None) of a torch ReduceOp.

    Args:
      op: a ``ReduceOp`` (as on ``opts.reduceOp``) or a ``ReduceOp.RedOpType``.
      what: the collective, for the error message.
    """
    kind = getattr(op, "op", op)
    if kind == ReduceOp.PREMUL_SUM:
        factor = getattr(op, "factor", None)
        if factor is None:  # torch versions without the attribute pickle it
            factor = op.__getstate__()[1]
        if isinstance(factor, torch.Tensor):
            factor = float(factor.item())
        return "sum", float(factor)
    name = _OPS.get(kind)
    if name is None:
        raise ValueError(f"{what}: reduce op {kind} is not supported by the ringzero backend "
                         f"(supported: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)")
    return name, None


def as_array(t: torch.Tensor):
    """A zero-copy numpy (CPU) or cupy (CUDA) view of a contiguous tensor.

    Temporary: wip-comm's collectives/arrays.py adapter replaces this once merged.
    """
    t = t.detach()
    if t.is_cuda:
        import cupy
        torch.cuda.current_stream(t.device).synchronize()  # the producer's kernels are done before we read
        if t.dtype == torch.bfloat16:
            import ml_dtypes
            return cupy.from_dlpack(t.view(torch.int16)).view(ml_dtypes.bfloat16)
        return cupy.from_dlpack(t)
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()
