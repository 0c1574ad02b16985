"""bench/bench_trajectories.py runs (``--smoke``: 200 trajectories) and reports each measure."""

from __future__ import annotations

from bench_script import run_bench, table_rows


def test_bench_trajectories_smoke_reports_each_measure() -> None:
    rows = {row[0]: row[1] for row in table_rows(run_bench("bench_trajectories.py", "--smoke"))[1:]}
    assert list(rows) == [
        "in-process `/log` store, ms per call, plain JSON insert (before)",
        "in-process `/log` store, ms per call, every trajectory kept (facts)",
        "ratio kept / plain",
        "`/log` over HTTP, ms per call",
        "`/log` over HTTP, trajectories/s",
        *(
            f"list p50 ms at 200 stored: {name}"
            for name in (
                "newest first",
                "split + step range + reward range",
                "zero-std groups only",
                "truncated only",
                "text search",
                "one prompt over time",
            )
        ),
    ]
    assert all(float(value.replace(",", "")) > 0 for value in rows.values())
