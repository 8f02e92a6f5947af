"""How the process group runs a call's collectives and hands torch a Work (group.py).

A call's collectives are "launches": ``launch(async_op)`` runs one on the
Communicator. ``start`` runs them on the caller's thread when torch says the
call blocks, else queues them and completes one torch future when the last
finishes, after copying staged outputs back (ops.Stage).
"""
from __future__ import annotations

import threading

import torch

from ..work import Work
from .errors import torch_error
from .ops import DoneWork, FutureWork


def contiguous(t) -> bool:
    """``t.is_contiguous()``; False for the compressed sparse layouts, which raise there."""
    try:
        return t.is_contiguous()
    except RuntimeError:
        return False


def start(launches, outputs, stage, opts=None):
    """Run the collectives; return a torch Work whose future holds ``outputs``.
    Blocking (``opts.asyncOp`` False; older torch does not say: async) they run on
    this thread; else they are queued and the last to finish completes the future."""
    if not getattr(opts, "asyncOp", True):
        try:
            for launch in launches:
                result = launch(False)
                if isinstance(result, Work):  # all-to-all: always queued
                    result.wait()
            stage.copy_back()
        except Exception as e:  # noqa: BLE001  wait() raises it, as on the async path
            return DoneWork(outputs, e)
        return DoneWork(outputs)
    fut = torch.futures.Future()
    works = [launch(True) for launch in launches]
    lock = threading.Lock()
    left = [len(works)]
    errors: list = []

    def finished(work):
        try:
            work.result()
        except BaseException as e:  # handed to whoever waits on the future
            errors.append(e)
        with lock:
            left[0] -= 1
            if left[0]:
                return
        try:
            if errors:
                raise errors[0]
            stage.copy_back()
        except BaseException as e:
            fut.set_exception(torch_error(e))
            return
        fut.set_result(outputs)

    if not works:
        stage.copy_back()
        fut.set_result(outputs)
    for w in works:
        w.add_done_callback(finished)
    return FutureWork(fut, works)
