"""bench/bench_engine.py runs (``--smoke``: 4 tokens, 2 requests, 1 group): both sides, every measure
and ratio, and group rollouts that prefill their prompt once with prefix sharing and 8 times without."""

from __future__ import annotations

from bench_script import run_bench, table_rows


def number(cell: str) -> float:
    return float(cell.split()[0].replace(",", "").rstrip("x"))


def test_bench_engine_smoke_reports_each_measure_for_both_sides() -> None:
    out = run_bench("bench_engine.py", "--smoke")
    header, *rows = table_rows(out)
    engine, groups = rows[:8], rows[9:]
    assert header == ["measure", "engine over HTTP", "transformers generate (threads)", "ratio"]
    assert [row[0] for row in engine] == [
        *(
            f"decode {unit}, {label}"
            for unit in ("tokens/s", "tokens per CPU-second")
            for label in ("1 request", "2 concurrent / batch 2", "2 concurrent vs generate at batch 1")
        ),
        "time to first token p50 (ms)",
        "health check p50 while 2 decode (ms)",
    ]
    for measure, ours, theirs, ratio in engine[:7]:
        assert number(ours) > 0 and number(theirs) > 0 and theirs.endswith("t)"), measure
        assert ratio.endswith(("x", "x faster")) and number(ratio) > 0, measure
    assert float(engine[7][1]) > 0
    assert "4 new tokens per request" in out and "load average" in out

    assert rows[8] == ["group rollout", "prefix sharing", "no prefix sharing", "ratio"]
    assert [row[0] for row in groups] == [
        f"{case}, {measure}"
        for case in ("`n`=8", "8 concurrent requests")
        for measure in (
            "completion tokens/s",
            "completion tokens per CPU-second",
            "prompt tokens prefilled per group",
        )
    ]
    prompt = int(out.split("-token prompt per group")[0].rsplit(" ", 1)[1])
    assert 290 <= prompt <= 310
    n_fill, requests_fill = groups[2], groups[5]
    assert number(n_fill[1]) == number(n_fill[2]) == prompt  # n choices always share their prompt
    assert number(requests_fill[1]) <= prompt + 7 * 16 and number(requests_fill[2]) == 8 * prompt
    assert all(number(row[1]) > 0 and number(row[2]) > 0 for row in groups)
