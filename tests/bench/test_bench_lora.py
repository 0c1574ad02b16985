"""bench/bench_lora.py runs (``--smoke``: 2-layer models): each adapter spread, both training modes."""

from __future__ import annotations

from bench_script import run_bench, table_rows


def test_bench_lora_smoke_reports_each_spread_and_mode() -> None:
    out = run_bench("bench_lora.py", "--smoke", "--device", "cpu", "--threads", "1")
    rows = table_rows(out)
    assert [row[0] for row in rows] == [
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
    for label, *cells in rows[1:7]:  # rates and step times, each with its ratio to the base model
        assert len(cells) == 6, label
        assert all(float(cells[i]) > 0 for i in (0, 2, 4)), label
        assert all(c.endswith("x") and float(c[:-1]) > 0 for c in cells[1::2]), label
    lora, full = ([float(c) for c in row[1:]] for row in rows[8:10])
    for figures in (lora, full):  # parameters, trainable, SFT step wall and CPU s, peak MiB
        assert figures[0] > 0 and figures[1] > 0 and figures[2] > 0 and figures[3] > 0 and figures[4] >= 0
    assert lora[1] < full[1] and abs(full[1] - full[0]) <= 0.05  # full trains every parameter
