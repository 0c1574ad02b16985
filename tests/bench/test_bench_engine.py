"""bench/bench_engine.py runs (``--smoke``: 4 tokens, 2 requests): both sides, every measure and ratio."""

from __future__ import annotations

from bench_script import run_bench, table_rows


def test_bench_engine_smoke_reports_each_measure_for_both_sides() -> None:
    out = run_bench("bench_engine.py", "--smoke")
    header, *rows = table_rows(out)
    assert header == ["measure", "engine over HTTP", "transformers generate", "ratio"]
    assert [row[0] for row in rows] == [
        "decode tokens/s, 1 request",
        "decode tokens/s, 2 concurrent / batch 2",
        "2 concurrent vs generate at batch 1",
        "time to first token p50 (ms)",
        "health check p50 while 2 decode (ms)",
    ]
    for measure, ours, theirs, ratio in rows[:4]:
        assert float(ours.replace(",", "")) >= 0 and float(theirs.replace(",", "")) >= 0, measure
        assert ratio.endswith(("x", "x faster")) and float(ratio.split("x")[0]) >= 0, measure
    assert float(rows[4][1]) >= 0
    assert "4 new tokens per request" in out
