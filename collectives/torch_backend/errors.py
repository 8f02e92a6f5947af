"""Errors in torch's own terms: what a ringzero failure looks like to torch's caller.

Handlers written for Gloo or NCCL catch ``torch.distributed.DistBackendError``
on a timeout, and torch's tools and tests look for "Timed out" in its text.
So a CollectiveTimeout that crosses into torch (a blocking call, a Work's
``wait()``, a future) becomes a :class:`TorchTimeout`: both torch's error and
ours, with our account (rank, peer, step, the ranks that never arrived) after
torch's wording.
"""
from __future__ import annotations

import torch.distributed as dist

from ..errors import CollectiveError, CollectiveTimeout


class TorchTimeout(dist.DistBackendError, CollectiveTimeout):
    """A ringzero timeout in torch's terms: ``except torch.distributed.DistBackendError``
    catches it as it catches Gloo's and NCCL's, and ``except CollectiveTimeout`` too."""


def torch_error(e: BaseException) -> Exception:
    """The error torch's caller sees for ``e``: a CollectiveTimeout becomes a
    TorchTimeout saying "Timed out" and then what ours says; any other exception is
    itself (a BaseException that is not an Exception is wrapped, for torch's futures)."""
    if isinstance(e, CollectiveTimeout) and not isinstance(e, TorchTimeout):
        t = TorchTimeout(f"ringzero: Timed out (the group's timeout passed): {e}")
        t.__cause__ = e
        return t
    return e if isinstance(e, Exception) else CollectiveError(repr(e))
