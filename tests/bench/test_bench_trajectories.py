"""bench/bench_trajectories.py runs (``--smoke``: 200 trajectories) and reports each measure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_trajectories_smoke_reports_each_measure() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_trajectories.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in out.stdout.splitlines()[2:]}
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
