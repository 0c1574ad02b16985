"""bench/step_heap.py runs (``--smoke``: a random 2-layer Llama with SmolLM2's vocabulary, the
minibatch whose layers are recomputed; the real model's figures are docs/performance.md's): each
allocator setting in a process of its own, every figure positive, and each time ratio the one of its
figures."""

from __future__ import annotations

import pytest
from bench_script import run_bench, table_rows


def test_step_heap_smoke_measures_each_setting_against_the_defaults() -> None:
    out = run_bench("step_heap.py", "--smoke", "--threads", "1")
    rows = [row for row in table_rows(out) if row[0].endswith(("recomputed", "kept"))]
    assert len(rows) == 3
    defaults: dict[str, float] = {}
    for shape, setting, peak, after, seconds, ratio in rows:
        assert float(peak) > 0 and float(after) >= 0 and float(seconds) > 0
        if setting.startswith("glibc's and torch's defaults"):
            defaults[shape] = float(seconds)
            assert ratio == "1.00x"
        assert float(ratio.rstrip("x")) == pytest.approx(float(seconds) / defaults[shape], rel=0.1, abs=0.02)
    assert sorted(defaults) == ["3,072 tokens, layers recomputed"]
