"""collectives/gpu_ring/explain.py: the kernels' host build on simulated ranks, every block's moves
shown, every rank's bytes equal to plan.traffic's formula and the result equal to the host ring."""
from __future__ import annotations

import re
import shutil

import pytest

from collectives.gpu_ring import explain, plan

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="explain runs the kernels' host build (g++)")


@pytest.mark.parametrize("kw", [
    dict(), dict(collective="reduce_scatter", ranks=4, count=50), dict(collective="all_gather", ranks=5, count=41, channels=3),
    dict(collective="all_reduce", direct=True, ranks=4, count=37), dict(collective="all_gather", direct=True),
    dict(kernel="oneshot"), dict(kernel="twoshot", ranks=4, dtype="bfloat16"), dict(kernel="oneshot", collective="all_gather"),
    dict(kernel="oneshot", collective="reduce_scatter", op="max"), dict(ranks=2, count=100, slot_bytes=16, dtype="float64")])
def test_every_block_is_shown_and_the_bytes_are_the_formulas(kw):
    text = explain.explain(**kw)
    assert text.splitlines()[-1] == "result: bit for bit the host ring; byte totals equal their formulas", text
    ranks = kw.get("ranks", 3)
    assert len(re.findall(r"formula \d+ B \(equal\)", text)) == ranks
    if kw.get("kernel", "ring") == "ring" and not kw.get("direct"):
        for r in range(ranks):  # step 0: each rank's own data into its right neighbour's first slot
            assert re.search(rf"r{r}\.b(\d+) +0 +0 .* x\[{r}\] -> slot r{(r + 1) % ranks}\.c\1#0", text), text


def test_a_wrong_formula_shows(monkeypatch):
    real = plan.traffic
    monkeypatch.setattr(plan, "traffic", lambda *a, **k: (real(*a, **k)[0], real(*a, **k)[1] + 1))
    text = explain.explain(ranks=2, count=16)
    assert "(DIFFERENT)" in text and text.endswith("byte totals DIFFER from their formulas")
    assert explain.main(["--ranks", "2", "--count", "16"]) == 1
