"""All-reduce of sparse COO tensors, as Gloo does it: gather, then coalesce.

Each rank's tensor has its own number of non-zeros, so the ranks first
all-gather a small description (sparse and dense dimensions, nnz, shape),
check that the tensors agree in everything but their non-zeros, then
all-gather every rank's indices and values (uneven counts), and every rank
adds the ranks' tensors in rank order and coalesces: the same arithmetic on
the same inputs on every rank, so every rank ends with the same bits. The
result replaces the caller's tensor (``copy_``), as Gloo's does. Only SUM,
as in Gloo; other layouts (CSR, CSC, BSR, BSC) are refused with the layout named.
"""
from __future__ import annotations

import numpy as np
import torch

from ..dtypes import check_reduction, torch_dtypes
from .ops import DoneWork

_META = 3  # sparse_dim, dense_dim, nnz; then the shape


def check_layout(t, op: str, factor, rank: int) -> None:
    """TypeError for a layout other than strided or sparse COO; ValueError for a sparse
    COO tensor and an op other than SUM."""
    what = f"allreduce on rank {rank}"
    if t.layout is not torch.sparse_coo:
        raise TypeError(f"{what}: a {t.layout} tensor; ringzero all-reduces strided tensors, and sparse "
                        f"COO ones with SUM (convert with .to_sparse_coo() or .to_dense())")
    if op != "sum" or factor is not None:
        raise ValueError(f"{what}: a sparse COO tensor reduces only with SUM (as in Gloo), not "
                         f"{'PREMUL_SUM' if factor is not None else op.upper()}")


def all_reduce(comm, tensors: list) -> DoneWork:
    """Sum each sparse COO tensor of ``tensors`` over the group, in place; the collectives
    run now (queued behind earlier async ones), so the Work returned is complete."""
    try:
        for t in tensors:
            t.copy_(_reduced(comm, t))
    except Exception as e:  # noqa: BLE001  wait() raises it, as for the dense collectives
        return DoneWork(list(tensors), e)
    return DoneWork(list(tensors))


def _reduced(comm, t):
    rank, n = comm.rank, comm.size
    x = t.detach().coalesce()
    check_reduction(_numpy_dtype(x.dtype), "sum", "allreduce of a sparse tensor", rank)
    shape = list(x.shape)
    mine = np.array([x.sparse_dim(), x.dense_dim(), x._nnz(), *shape], np.int64)
    every = comm.all_gather(mine).reshape(n, -1)  # a different rank count of dimensions: MismatchError
    for q in range(n):
        if (every[q, :2] != mine[:2]).any() or (every[q, _META:] != mine[_META:]).any():
            raise ValueError(f"allreduce of a sparse tensor on rank {rank}: rank {q} has shape "
                             f"{every[q, _META:].tolist()} with {every[q, 0]} sparse and {every[q, 1]} dense "
                             f"dimensions, this rank {shape} with {x.sparse_dim()} and {x.dense_dim()}")
    nnz = every[:, 2].tolist()
    sparse_dim, dense = x.sparse_dim(), shape[x.sparse_dim():]
    row = int(np.prod(dense, dtype=np.int64))
    # indices laid out per rank, nnz-major ([nnz, sparse_dim]), so each rank's piece is contiguous
    idx = comm.all_gather(x.indices().t().contiguous().reshape(-1).to(torch.int64),
                          counts=[c * sparse_dim for c in nnz])
    vals = comm.all_gather(x.values().contiguous().reshape(-1), counts=[c * row for c in nnz])
    out, i0, v0 = None, 0, 0
    for c in nnz:  # Gloo's order: rank 0's tensor, plus rank 1's, ...
        part = torch.sparse_coo_tensor(idx[i0:i0 + c * sparse_dim].reshape(c, sparse_dim).t(),
                                       vals[v0:v0 + c * row].reshape([c, *dense]), shape)
        out = part if out is None else out + part
        i0, v0 = i0 + c * sparse_dim, v0 + c * row
    return out.coalesce()


def _numpy_dtype(dtype) -> np.dtype:
    row = _ROWS.get(dtype)
    if row is None:
        raise TypeError(f"allreduce of a sparse tensor: unsupported dtype {dtype}")
    return row.numpy


_ROWS = torch_dtypes(torch)
