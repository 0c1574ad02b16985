"""bench/bench_lora.py runs (``--smoke``: 2-layer models): each adapter spread, both training modes."""

from __future__ import annotations

from bench_script import run_bench, table_rows


def test_bench_lora_smoke_reports_each_spread_and_mode() -> None:
    out = run_bench("bench_lora.py", "--smoke", "--device", "cpu", "--threads", "1")
    assert [row[0] for row in table_rows(out)] == [
        "requests on",
        "base model alone",
        "1 adapter",
        "4 adapters, grouped",
        "4 adapters, gathered",
        "16 adapters, grouped",
        "16 adapters, gathered",
        "training",
        "LoRA r=8, 7 projections",
        "full fine-tuning",
    ]
    assert "on cpu (float32)" in out and "training on cpu (float32)" in out
