"""bench/bench_traces.py runs (``--smoke``: 1,000 calls, 3 queries per p50) and reports each measure.

Both sides run: ours whole (``toolkit serve``, ingest, the three queries, the streamed scan) and
Weave's SQLite trace server (weave==0.52.38, in ``.venv-weave``, which ``scripts/test`` builds from
``bench/weave-requirements.txt``), so a broken peer side fails the suite. Every figure must be
positive (the scan's memory growth may be 0) and each ratio the one of the two figures beside it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from bench_script import ROOT, run_bench, table_rows

MEASURES = [
    "ingest, calls/s (`/call/upsert_batch`, 500 calls a request)",
    "by op, newest first, limit 100, p50 ms",
    "roots only, newest first, limit 100, p50 ms",
    "$expr latency > 1900.5 ms, limit 100, p50 ms",
    "full streamed scan, rows/s (1,000 rows)",
    "memory growth of the server during the scan, MB",
    "server CPU per call ingested, µs",
    "server CPU per query (the three above), ms",
    "server CPU per row scanned, µs",
]


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def interval(cell: str) -> tuple[float, float]:
    """The values a figure printed with its decimals stands for (half a unit of its last digit)."""
    digits = cell.replace(",", "")
    half = 0.5 * 10 ** -len(digits.partition(".")[2])
    return float(digits) - half, float(digits) + half


def ratio_of(top: str, bottom: str) -> tuple[float, float]:
    """The ratios of the values two printed figures stand for."""
    (a, b), (c, d) = interval(top), interval(bottom)
    return a / d, b / max(c, 1e-12)


def test_bench_traces_smoke_runs_both_sides_and_reports_each_measure() -> None:
    header, *rows = table_rows(run_bench("bench_traces.py", "--smoke"))
    assert header == ["measure", "ours", "Weave SQLite", "ratio"]
    assert [row[0] for row in rows] == MEASURES
    growth = "memory growth of the server during the scan, MB"
    for measure, ours, weave, ratio in rows:
        if measure == growth:  # the scan may need no new memory
            assert number(ours) >= 0 and number(weave) >= 0 and ratio == ""
            continue
        assert number(ours) > 0 and number(weave) > 0, (measure, ours, weave)
        assert ratio.endswith(("x", "x faster", "x less")), ratio
        shown = ratio.removesuffix(" faster").removesuffix(" less").removesuffix("x")
        rate = "/s" in measure  # calls/s, rows/s: ours over theirs; times: theirs over ours
        low, high = ratio_of(ours, weave) if rate else ratio_of(weave, ours)
        shown_low, shown_high = interval(shown)  # the ratio, rounded from the unrounded figures
        assert shown_high >= low and shown_low <= high, (measure, ours, weave, ratio)


def test_bench_traces_scaling_reports_each_size_and_writes_both_figures(tmp_path: Path) -> None:
    args = ["--smoke", "--ours-only", "--scaling", "500,1000", "--charts", str(tmp_path)]
    out = run_bench("bench_traces.py", *args)
    header, *rows = table_rows(out)
    assert header[:3] == ["calls", "side", "ingest, calls/s"] and header[-1] == "scan memory growth, MB"
    assert [row[:2] for row in rows] == [["500", "ours"], ["1,000", "ours"]]
    figures = {"traces_scaling.svg": "ours: ingest", "traces_scaling_queries.svg": "ours: by op"}
    for name, series in figures.items():
        svg = (tmp_path / name).read_text()
        assert svg.startswith("<?xml") and series in svg


def test_bench_traces_report_sets_weave_figures_beside_ours() -> None:
    spec = importlib.util.spec_from_file_location("bench_traces", ROOT / "bench" / "bench_traces.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def side(scale: float) -> dict[str, Any]:
        queries = {name: (2.0 * scale, 100) for name in bench.QUERIES}
        scan = {"rows": 1000, "rows_per_s": 5000.0 / scale, "rss_growth_mb": 3.0 * scale}
        cpu = {"ingest_us": 50.0 * scale, "query_ms": 1.5 * scale, "scan_us": 4.0 * scale}
        return {"ingest": 1000.0 / scale, "queries": queries, "scan": scan, "cpu": cpu}

    rows = table_rows(bench.table(1000, side(1), side(2)))[1:]
    assert [row[0] for row in rows] == MEASURES
    assert [row[2:] for row in rows] == [
        ["500", "2.0x"],
        *[["4.0", "2.0x faster"]] * 3,
        ["2,500", "2.0x"],
        ["6", ""],
        ["100.0", "2.0x less"],
        ["3.00", "2.0x less"],
        ["8.00", "2.0x less"],
    ]
