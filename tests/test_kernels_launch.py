"""The GPU-free half of the CUDA path: kernel names, vector widths, head/tail
splits and grid sizes (collectives/kernels/launch.py)."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from collectives.dtypes import DTYPES, KERNEL_DTYPES, bfloat16
from collectives.kernels import launch
from sharding.optim_cuda import optim_kernel  # (registers sharding/kernels/optim.cu)


@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
@pytest.mark.parametrize("op", launch.REDUCE_OPS)
def test_reduce_kernel_names(dtype, op):
    name = launch.reduce_kernel(op, DTYPES[dtype][0])
    assert name == f"rz_reduce_{op}_{DTYPES[dtype].kernel}"
    assert name in launch.kernel_names()["reduce.cu"]


def test_kernel_names_are_unique_and_complete():
    names = launch.kernel_names()
    flat = [n for ns in names.values() for n in ns]
    assert len(flat) == len(set(flat)) == 24 + 4 + 6 + 6
    assert launch.scale_kernel(np.int64) == "rz_scale_i64"
    assert launch.cast_kernel(np.float32, bfloat16) == "rz_cast_f32_bf16"
    assert launch.cast_kernel(np.float16, np.float32) == "rz_cast_f16_f32"
    assert optim_kernel("adamw") == "rz_adamw_f32"
    assert optim_kernel("sgd", bfloat16) == "rz_sgd_f32_bf16"


def test_bad_names_raise():
    with pytest.raises(ValueError, match="avg"):
        launch.reduce_kernel("avg", np.float32)  # avg is sum then scale
    with pytest.raises(TypeError, match="no CUDA kernels for dtype uint8"):
        launch.reduce_kernel("sum", np.uint8)
    with pytest.raises(TypeError, match="unsupported dtype"):
        launch.reduce_kernel("sum", np.float128)
    with pytest.raises(TypeError, match="no cast kernel"):
        launch.cast_kernel(np.float16, bfloat16)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        optim_kernel("adamw", np.float64)
    with pytest.raises(ValueError):
        optim_kernel("lamb")


def test_vector_width():
    assert [launch.vector_width(s) for s in (1, 2, 4, 8, 16)] == [16, 8, 4, 2, 1]
    assert launch.vector_width(4, 2) == 4  # f32 <-> bf16 casts: 16 + 8 bytes
    assert launch.vector_width(4, 4, 4, 4, 2) == 4  # AdamW with a bf16 copy
    for bad in ((), (3,), (0,), (32,)):
        with pytest.raises(ValueError):
            launch.vector_width(*bad)


def _covered(sp, n):
    """Element indices each loop touches, as the kernels compute them."""
    tail0 = sp.head + sp.nvec * sp.width
    vec = [sp.head + i * sp.width + j for i in range(sp.nvec) for j in range(sp.width)]
    scal = [i if i < sp.head else tail0 + (i - sp.head) for i in range(sp.head + sp.tail)]
    return vec, scal


@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_split_covers_every_element_once_and_aligns(itemsize):
    width = 16 // itemsize
    for n, off in itertools.product([0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 100, 1001], range(width)):
        base = 4096 + off * itemsize
        sp = launch.split(n, [base, base + 64, base + 1024 * itemsize], [itemsize] * 3, width)
        vec, scal = _covered(sp, n)
        assert sorted(vec + scal) == list(range(n))
        assert sp.head + sp.vector_elems + sp.tail == n
        assert 0 <= sp.head < width or sp.head == n
        assert sp.tail < width
        for i in range(sp.nvec):  # every vector starts 16-byte aligned
            assert (base + (sp.head + i * width) * itemsize) % 16 == 0


def test_split_misaligned_buffers_go_scalar():
    sp = launch.split(100, [4096, 4096 + 4], [4, 4], 4)  # a and b at different phases
    assert (sp.head, sp.nvec, sp.tail) == (100, 0, 0)
    sp = launch.split(100, [4096 + 2], [4], 4)  # not even element-aligned
    assert sp.nvec == 0 and sp.head == 100


def test_split_mixed_element_sizes():
    # f32 source at phase 1 (4 bytes past 16) and bf16 dest at phase 1 (2 bytes past 8): aligned together
    sp = launch.split(10, [4096 + 4, 8192 + 2], [4, 2], 4)
    assert (sp.head, sp.nvec, sp.tail) == (3, 1, 3)
    assert (4096 + 4 + 3 * 4) % 16 == 0 and (8192 + 2 + 3 * 2) % 8 == 0
    sp = launch.split(10, [4096 + 4, 8192], [4, 2], 4)  # phases 1 and 0: scalar
    assert sp.nvec == 0


def test_split_edge_cases():
    assert launch.split(0, [4096], [4], 4) == launch.Split(0, 0, 4, 0)
    assert launch.split(2, [4100], [4], 4) == launch.Split(2, 0, 4, 0)  # head longer than n
    with pytest.raises(ValueError):
        launch.split(-1, [0], [4], 4)
    with pytest.raises(ValueError):
        launch.split(4, [0, 16], [4], 4)


def test_grid_size():
    sm = 132
    assert launch.grid_size(launch.Split(0, 0, 4, 0), sm) == 1
    assert launch.grid_size(launch.Split(3, 0, 4, 0), sm) == 1
    assert launch.grid_size(launch.Split(0, 256, 4, 0), sm) == 1
    assert launch.grid_size(launch.Split(0, 257, 4, 0), sm) == 2
    big = launch.Split(0, 1 << 28, 4, 0)
    assert launch.grid_size(big, sm) == sm * launch.BLOCKS_PER_SM
    assert launch.grid_size(launch.Split(1000, 0, 1, 0), sm) == 4
    with pytest.raises(ValueError):
        launch.grid_size(big, 0)


def test_plan():
    p = launch.plan("rz_reduce_sum_f32", 1 << 20, [(4096, 4)] * 3, sm_count=132)
    assert p.block == launch.BLOCK == 256
    assert p.split == launch.Split(0, 1 << 18, 4, 0)
    assert p.grid == min(1024, 132 * 8)
    p = launch.plan("rz_cast_f32_bf16", 10, [(4096 + 4, 4), (8192 + 2, 2)], sm_count=1)
    assert p.split.width == 4 and p.split.head == 3


def _header_bytes(file):
    text = launch.source_path(file).read_text()
    return dict((m.group(1), m.group(2)) for m in re.finditer(r"^// bytes: (rz_\w+) (.*?)\s{2,}\(", text, re.M))


def test_cu_headers_state_the_bytes_launch_py_counts():
    """The napkin lines of the .cu headers and bytes_moved agree."""
    assert _header_bytes("reduce.cu") == {"rz_reduce": "read 2E write 1E"}
    assert launch.bytes_moved("reduce", 10, 4) == 10 * (2 * 4 + 4)
    cast = _header_bytes("cast.cu")
    assert cast == {"rz_cast": "read 1S write 1D", "rz_scale": "read 1E write 1E"}
    assert launch.bytes_moved("cast", 10, 2, src_itemsize=4) == 60
    assert launch.bytes_moved("scale", 10, 8) == 160
    optim = _header_bytes("optim.cu")
    assert optim == {"rz_adamw": "read 16 write 12 lowp 2", "rz_sgd": "read 12 write 8 lowp 2"}
    assert launch.bytes_moved("adamw", 10) == 280
    assert launch.bytes_moved("adamw", 10, lowp=True) == 300
    assert launch.bytes_moved("sgd", 10) == 200
    assert launch.bytes_moved("sgd", 10, momentum=False) == 120
    assert launch.bytes_moved("copy", 10, 4) == 80
    with pytest.raises(ValueError):
        launch.bytes_moved("cast", 10, 2)
    with pytest.raises(ValueError):
        launch.bytes_moved("fft", 10)


def test_split_read_only_input_at_another_phase_is_loose_not_scalar():
    """An uneven ring segment (odd offset) reduced with an aligned scratch chunk: the written
    buffer sets the phase, the input at the other phase is read element by element (loose);
    before, the whole chunk went scalar."""
    a, b, out = 4096 + 3 * 4, 8192, 4096 + 3 * 4  # a and out at phase 3, scratch b at phase 0
    sp = launch.split(1000, [a, b, out], [4] * 3, 4, readonly=(0, 1))
    assert (sp.head, sp.nvec, sp.tail, sp.loose) == (1, 249, 3, 0b10)
    assert (out + sp.head * 4) % 16 == 0
    sp = launch.split(1000, [8192, a, out], [4] * 3, 4, readonly=(0, 1))  # both inputs elsewhere
    assert sp.loose == 0b01 and sp.nvec == 249
    sp = launch.split(1000, [a + 4, b, out], [4] * 3, 4, readonly=(0, 1))
    assert sp.loose == 0b11 and sp.nvec == 249
    # written buffers that disagree still go scalar; so does a read-only one not element-aligned
    assert launch.split(1000, [b, a, 8192], [4] * 3, 4, readonly=(0,)).nvec == 0  # written: phases 3 and 0
    assert launch.split(1000, [a, b + 2, out], [4] * 3, 4, readonly=(0, 1)).nvec == 0
    # without readonly every buffer must agree, as before
    assert launch.split(1000, [a, b, out], [4] * 3, 4).nvec == 0
    # nothing to vectorize: no loose bits
    assert launch.split(2, [a, b, out], [4] * 3, 4, readonly=(0, 1)).loose == 0
    p = launch.plan("rz_reduce_sum_f32", 1000, [(a, 4), (b, 4), (out, 4)], sm_count=132, readonly=(0, 1))
    assert p.split.loose == 0b10 and p.split.nvec == 249


def test_default_unroll_is_the_one_in_the_sources():
    text = (launch.CSRC / "rz_common.cuh").read_text()
    assert f"#define RZ_UNROLL {launch.DEFAULT_UNROLL}\n" in text
    assert launch.DEFAULT_UNROLL in launch.UNROLLS
    assert "-DRZ_UNROLL=2" in launch.nvrtc_options("reduce.cu", "sm_90", 2)
    assert not any(o.startswith("-D") for o in launch.nvrtc_options("optim.cu", "sm_90", 2))
    with pytest.raises(ValueError):
        launch.nvrtc_options("reduce.cu", "sm_90", 8)
