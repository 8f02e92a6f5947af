"""The collective runtime on one process: integer avg, the progress engine, wait policy."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from collectives.kernels import reference as R
from collectives.kernels.numpy_kernels import NUMPY_KERNELS


@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_int_avg_of_the_type_minimum_keeps_its_sign(dt):
    """A sum of exactly INT_MIN divided by the world size: |INT_MIN| overflows,
    so the old kernel returned a positive quotient."""
    info = np.iinfo(dt)
    x = np.array([info.min, info.min + 1, info.max, -7, 7, -1, 0, -9, 9], dt)
    for d in (1, 2, 3, 4, 8):
        want = torch.div(torch.from_numpy(x), d, rounding_mode="trunc").numpy()
        y = x.copy()
        NUMPY_KERNELS.scale(y, d)
        assert np.array_equal(y, want), (d, y, want)
        if dt is np.int32:  # the reference widens to int64 first
            assert np.array_equal(y, R.scale(x, d))


def test_uint_avg_divides():
    x = np.array([0, 1, 7, 255], np.uint8)
    NUMPY_KERNELS.scale(x, 2)
    assert x.tolist() == [0, 0, 3, 127]


def test_closing_never_runs_a_queued_task_beside_an_inline_call():
    """A task queued while a blocking call runs inline waits for it, also once
    close() has been called (the loop used to wake on ``_closed`` and run it)."""
    import threading

    from collectives.work import Engine

    eng = Engine("test")
    inline_running, release, seen = threading.Event(), threading.Event(), []

    def inline():
        inline_running.set()
        release.wait(10)
        return "inline"

    t = threading.Thread(target=lambda: seen.append(eng.run(inline, "inline")))
    t.start()
    assert inline_running.wait(10)
    work = eng.submit(lambda: seen.append(("queued ran while inline ran", not release.is_set())), "queued")
    closer = threading.Thread(target=eng.close)
    closer.start()
    closer.join(0.3)  # old code: the loop wakes on _closed and runs the queued task now
    release.set()
    t.join(10)
    closer.join(10)
    work.wait(10)
    assert ("queued ran while inline ran", True) not in seen, seen
    assert seen[0] == "inline" and seen[1] == ("queued ran while inline ran", False), seen
