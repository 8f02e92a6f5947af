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
