"""bench/bench_agent.py runs (``--smoke``: 4 episodes each way) and reports each measure."""

from __future__ import annotations

from bench_script import run_bench, table_rows


def test_bench_agent_smoke_reports_the_loop_share() -> None:
    rows = {row[0]: row[1] for row in table_rows(run_bench("bench_agent.py", "--smoke"))[1:]}
    assert list(rows) == [
        "episodes, sequential",
        "model turns, sequential",
        "wall s, sequential",
        "inside model calls s, sequential",
        "outside model calls, % of wall",
        "outside model calls, ms per turn",
        "episodes/s at concurrency 16",
        "turns/s at concurrency 16",
    ]
    values = {name: float(value) for name, value in rows.items()}
    assert values["episodes, sequential"] == 4 and values["model turns, sequential"] >= 4
    assert 0 < values["inside model calls s, sequential"] < values["wall s, sequential"]
    assert 0 < values["outside model calls, % of wall"] < 100
