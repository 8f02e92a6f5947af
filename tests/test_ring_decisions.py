"""The GPU kernel road's decisions, with no device: which calls it serves and with which
kernel (road.py), how ranks get co-resident (residency.py, with fakes for the probe and
MPS), how many channels and blocks a call gets (ring.Ring.plan), and what an error
record says (record.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectives.errors import CollectiveTimeout
from collectives.gpu_ring import layout, record, residency, road, source, tuning


@pytest.mark.parametrize("coll,nbytes,kind", [
    ("all_reduce", 0, "oneshot"), ("all_reduce", tuning.ONESHOT_MAX_BYTES, "oneshot"),
    ("all_reduce", tuning.ONESHOT_MAX_BYTES + 1, "twoshot"), ("all_reduce", tuning.TWOSHOT_MAX_BYTES, "twoshot"),
    ("all_reduce", tuning.TWOSHOT_MAX_BYTES + 1, "ring"), ("reduce_scatter", tuning.SMALL_MAX_BYTES, "oneshot"),
    ("reduce_scatter", tuning.SMALL_MAX_BYTES + 1, "ring"), ("all_gather", 1 << 30, "ring")])
def test_the_kernel_follows_the_crossovers(coll, nbytes, kind):
    assert road.kernel_kind(coll, nbytes) == kind
    assert road.kernel_kind(coll, nbytes, all_peers=False) == "ring"
    assert road.kernel_kind(coll, min(nbytes, 4096), stage_bytes=16) == ("ring" if nbytes > 16 else kind)


def test_can_serve_says_why_not():
    ok = road.can_serve("all_reduce", np.float32, "sum", 1 << 20, 4)
    assert ok.ok and ok.kernel == "ring" and "1048576 bytes of float32 on 4 ranks" in ok.reason
    assert road.can_serve("all_gather", "bfloat16", None, 100, 2).kernel == "oneshot"
    cases = [(dict(collective="broadcast"), "not a collective"), (dict(dtype=np.uint8), "dtype"),
             (dict(op="avg"), "avg as sum"), (dict(world=1), "2..8 ranks"), (dict(world=9), "2..8 ranks"),
             (dict(device=False), "host memory"), (dict(one_node=False), "other nodes"),
             (dict(element_aligned=False), "aligned"), (dict(coresident=False), "resident")]
    for change, why in cases:
        kw = dict(collective="all_reduce", dtype=np.float32, op="sum", nbytes=64, world=4)
        kw.update(change)
        v = road.can_serve(kw.pop("collective"), kw.pop("dtype"), kw.pop("op"), kw.pop("nbytes"), kw.pop("world"), **kw)
        assert not v.ok and why in v.reason, (change, v)


def test_channels_and_blocks_stay_within_the_sms():
    assert road.channels(0, 16) == 1 and road.channels(tuning.CHANNEL_MIN_BYTES * 5, 16) == 5
    assert road.channels(1 << 40, 16) == 16 and road.channels(1 << 40, 16, nlocal=8, sm_count=132) == 16
    assert road.channels(1 << 40, 32, nlocal=8, sm_count=132) == 16  # 8 x 16 = 128 <= 132
    assert road.small_blocks(1, 32) == 1 and road.small_blocks(1 << 30, 32, nlocal=4, sm_count=40) == 10


class FakeBackend:
    """Just what Ring.plan asks of a backend."""
    sm_count, block, cooperative, name = 132, 512, True, "fake"


def _ring(mode, channels=16, nlocal=4, sm_count=132):
    from collectives.gpu_ring.ring import Ring
    be = FakeBackend()
    be.sm_count = sm_count
    geo = layout.Geometry(channels=16, slots=8, slot_bytes=1 << 17, stage_bytes=1 << 19)
    res = residency.Residency(True, mode, channels, "test")
    return Ring(be, nlocal, range(nlocal), {}, [0] * nlocal, geo, 1.0, res)


def test_ring_plan_picks_kernel_channels_and_mode():
    r = _ring("cooperative")
    assert r.plan("all_reduce", 4096) == {"kernel": "oneshot", "channels": 1, "mode": "cooperative"}
    assert r.plan("all_reduce", 64 << 20)["channels"] == 16
    assert r.plan("all_reduce", 3 << 20) == {"kernel": "ring", "channels": 3, "mode": "cooperative"}
    assert _ring("streams", channels=5).plan("all_reduce", 64 << 20)["channels"] == 5  # residency's cap
    with pytest.raises(ValueError, match="staging"):
        r.plan("all_reduce", 1 << 20, kernel="oneshot")
    with pytest.raises(ValueError, match="channels"):
        r.plan("all_reduce", 1 << 20, kernel="ring", channels=17)
    with pytest.raises(ValueError, match="SMs"):
        _ring("streams", channels=16, nlocal=8, sm_count=64).plan("all_reduce", 1 << 30, channels=16)


def test_virtual_ranks_launch_cooperatively_or_on_streams_within_the_sms():
    v = residency.virtual_ranks(8, 16, 132, cooperative=True, max_coop_blocks=132)
    assert v.ok and v.mode == "cooperative" and v.channels == 16
    v = residency.virtual_ranks(8, 16, 132, cooperative=True, max_coop_blocks=100)
    assert v.ok and v.mode == "streams" and v.channels == 16  # 128 blocks on 132 SMs
    v = residency.virtual_ranks(8, 32, 132, cooperative=False, max_coop_blocks=0)
    assert v.ok and v.mode == "streams" and v.channels == 16 and "cut from 32" in v.reason
    v = residency.virtual_ranks(8, 4, 6, cooperative=False, max_coop_blocks=0)
    assert not v.ok and v.mode == "refused"


def test_processes_on_one_gpu_need_mps_and_a_probe_that_passes():
    calls = []

    def probe(result):
        def run():
            calls.append(1)
            return result
        return run
    assert residency.processes(1, 8, mps=False, probe=None).mode == "one-per-gpu"
    no = residency.processes(2, 8, mps=False, probe=probe(residency.ProbeResult(1, 64, 1000)))
    assert not no.ok and "without MPS" in no.reason and not calls  # no probe without MPS
    good = residency.processes(2, 8, mps=True, probe=probe(residency.ProbeResult(1, tuning.PROBE_ROUNDS, 80_000)))
    assert good.ok and good.mode == "mps" and calls == [1]
    late = residency.processes(2, 8, mps=True, probe=probe(residency.ProbeResult(2, 3, 100_000_000)))
    assert not late.ok and "3 of 64 round trips" in late.reason
    assert not residency.processes(2, 8, mps=True, probe=None).ok
    assert not residency.processes(3, 8, mps=True, probe=probe(residency.ProbeResult(1, 64, 1))).ok


def test_mps_is_found_by_its_control_pipe():
    seen = []

    def exists(p: Path) -> bool:
        seen.append(p)
        return p == Path("/run/mps/control")
    assert residency.mps_active({"CUDA_MPS_PIPE_DIRECTORY": "/run/mps"}, exists)
    assert not residency.mps_active({}, exists) and seen[-1] == Path("/tmp/nvidia-mps/control")


def _err(**kw) -> layout.Err:
    e = layout.Err()
    e.valid = 1
    for k, v in kw.items():
        setattr(e, k, v)
    return e


def test_a_timeout_record_names_rank_peer_step_and_counters():
    e = record.decode(_err(rank=3, channel=1, step=2, coll=2, round=5, kind=layout.WAIT_DATA, cause=layout.TIMEOUT,
                           peer=2, blamed=2, wanted=41, seen=40, waited_ns=2_500_000_000), world=4)
    assert isinstance(e, CollectiveTimeout) and (e.rank, e.peer, e.step, e.channel, e.cause) == (3, 2, 2, 1, "timeout")
    s = str(e)
    assert "rank 3 timed out after 2.500 s" in s and "reduce-scatter half, step 2 of 7" in s
    assert "waiting for rank 2: its data (ready counter) stayed at 40, wanted 41" in s and "round 5, channel 1" in s
    assert "chain" not in s


def test_an_aborted_record_names_who_gave_up_first():
    word = (2 + 1) | ((1 + 1) << 16) | (layout.WAIT_SLOT << 32)
    assert record.abort_origin(word) == (2, 1, layout.WAIT_SLOT) and record.abort_origin(0) is None
    e = record.decode(_err(rank=0, step=5, coll=2, kind=layout.WAIT_DATA, cause=layout.ABORTED, peer=3, abort=word), 4)
    assert e.cause == "aborted" and e.origin == (2, 1)
    assert "rank 0 left at all-gather half, step 5 of 7" in str(e)
    assert "because rank 2 timed out, blaming rank 1 (it waited for a free slot (freed counter))" in str(e)
    c = record.decode(_err(rank=4, step=1, coll=0, kind=layout.WAIT_DATA, cause=layout.TIMEOUT, peer=3, blamed=2), 5)
    assert c.blamed == 2 and "rank 3 was itself waiting, and the chain of waiting ranks ends at rank 2" in str(c)
    h = record.decode(_err(rank=1, coll=7, step=2, kind=layout.WAIT_ARRIVE, cause=layout.HOST_ABORT, peer=0, abort=1), 2)
    assert h.cause == "host abort" and "two-shot all-reduce, barrier 2" in str(h) and "the host aborted" in str(h)
    assert record.decode(layout.Err(), 4) is None


def test_kernel_names_cover_every_dtype_op_and_kind():
    names = source.kernel_names()
    assert len(names["ring.cu"]) == 1 + 2 * 6 * 4 and len(names["ring_small.cu"]) == 1 + 3 * 6 * 4 + 1
    assert source.ring_kernel("all_reduce", "max", "bfloat16") == "rz_ring_ar_max_bf16"
    assert source.small_kernel("twoshot", "all_reduce", "sum", np.int64) == "rz_twoshot_ar_sum_i64"
    assert source.file_of("rz_probe") == "ring_small.cu"
    with pytest.raises(ValueError, match="avg"):
        source.ring_kernel("all_reduce", "avg", np.float32)
    with pytest.raises(ValueError):
        source.small_kernel("twoshot", "all_gather", None, np.float32)
    text = source.kernel_source("ring.cu")
    assert '#include "' not in text and "struct RzArgs" in text and "pragma once" not in text
